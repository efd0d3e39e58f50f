"""The README's host snippets, executed as written, serving the real default model."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path
from typing import Any

import httpx
import pytest
from asgi_lifespan import LifespanManager

README = Path(__file__).resolve().parents[2] / "README.md"
pytestmark = pytest.mark.anyio


def run_snippet(name: str) -> dict[str, Any]:
    """Execute a snippet as a module of its own (frameworks resolve annotations through it)."""
    module = types.ModuleType(f"readme_{name.replace('-', '_')}")
    sys.modules[module.__name__] = module
    exec(compile(snippet(name), "README.md", "exec"), module.__dict__)
    return module.__dict__


def snippet(name: str) -> str:
    match = re.search(rf"<!-- readme-test: {name} -->\n```python\n(.*?)```", README.read_text(), re.S)
    assert match, f"README snippet {name!r} not found"
    return match.group(1)


async def test_starlette_mount_example_serves_chat_and_host_routes() -> None:
    namespace = run_snippet("starlette")
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


async def _serve_and_ask(app: Any, llm: Any, home: str) -> None:
    async with LifespanManager(app, startup_timeout=60):
        await llm.pool.wait_ready()
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://host") as http:
            assert (await http.get("/")).json() == {"hello": home}
            reply = await http.post(
                "/v1/chat/completions",
                json={"model": "default", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4},
            )
            assert reply.status_code == 200 and reply.json()["usage"]["completion_tokens"] <= 4
    assert not llm.pool.thread.alive


async def test_fastapi_example() -> None:
    namespace = run_snippet("fastapi")
    await _serve_and_ask(namespace["app"], namespace["llm"], "from FastAPI")


async def test_litestar_example() -> None:
    namespace = run_snippet("litestar")
    app = namespace["app"]
    (plugin,) = [p for p in app.plugins if type(p).__name__ == "LLMPlugin"]
    await _serve_and_ask(app, plugin.llm, "from Litestar")


def test_django_settings_example_is_a_valid_configuration() -> None:
    from asgi_llm.contrib.django.conf import parse_options

    namespace = run_snippet("django-settings")
    assert "asgi_llm.contrib.django" in namespace["INSTALLED_APPS"]
    options = parse_options(namespace["ASGI_LLM"])
    assert (options.prefix, options.ollama_at_root) == ("/v1", True)
    (model,) = options.settings.models
    assert model.n_gpu_layers == -1 and model.aliases == ("default",)
