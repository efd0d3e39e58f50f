"""The README's mounting example, executed as written, serving the real default model."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import pytest
from asgi_lifespan import LifespanManager

README = Path(__file__).resolve().parents[2] / "README.md"
pytestmark = pytest.mark.anyio


def snippet(name: str) -> str:
    match = re.search(rf"<!-- readme-test: {name} -->\n```python\n(.*?)```", README.read_text(), re.S)
    assert match, f"README snippet {name!r} not found"
    return match.group(1)


async def test_starlette_mount_example_serves_chat_and_host_routes() -> None:
    namespace: dict[str, Any] = {}
    exec(compile(snippet("starlette"), "README.md", "exec"), namespace)
    app, llm = namespace["app"], namespace["llm"]
    async with LifespanManager(app, startup_timeout=60):
        await llm.pool.wait_ready()
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://host") as http:
            assert (await http.get("/")).text == "my own route"
            reply = await http.post(
                "/v1/chat/completions",
                json={"model": "default", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4},
            )
            assert reply.status_code == 200
            assert reply.json()["usage"]["completion_tokens"] <= 4
            embedded = await http.post("/v1/embeddings", json={"model": "default", "input": "hi"})
            assert len(embedded.json()["data"][0]["embedding"]) == 576
    assert not llm.pool.thread.alive
