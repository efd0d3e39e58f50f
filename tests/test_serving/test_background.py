"""Background Responses refused where they cannot be kept, in OpenAI's error shape naming the
field; and the store's sweep of a dead server's runs (the live flow: test_background_sdk.py)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import httpx
import pytest

from asgi_llm import LLMApp, ModelConfig, ModelPool, Settings
from asgi_llm.engines.fake import FakeEngine
from asgi_llm.serving.background import RUN_SUFFIX, BackgroundRuns
from asgi_llm.storage.state import SQLiteStore

pytestmark = pytest.mark.anyio

BODY = {"model": "fake", "input": "hi", "background": True}


def _app(**options: object) -> LLMApp:
    settings = Settings(models=(ModelConfig(id="fake", path="unused.gguf"),), **options)  # type: ignore[arg-type]
    return LLMApp(pool=ModelPool(settings, engine_factory=lambda config, thread: FakeEngine(config, thread)))


async def _post(app: LLMApp, path: str, body: object = None, method: str = "POST") -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with app.lifespan(), httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        return await client.request(method, path, json=body)


async def test_background_needs_a_persistent_store() -> None:
    reply = await _post(_app(), "/responses", BODY)
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert error["param"] == "background" and "state_store" in error["message"] and "state_url" in error["message"]


async def test_a_response_not_run_in_the_background_is_neither_streamed_again_nor_cancelled(tmp_path: Path) -> None:
    app = _app(state_store="sqlite", state_path=str(tmp_path / "s.sqlite3"))
    transport = httpx.ASGITransport(app=app)
    async with app.lifespan(), httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        plain = (await client.post("/responses", json={"model": "fake", "input": "hi"})).json()
        streamed = await client.get(f"/responses/{plain['id']}", params={"stream": "true"})
        cancelled = await client.post(f"/responses/{plain['id']}/cancel")
        done = (await client.post("/responses", json=BODY)).json()  # runs to its end inside the call here
        after = (await client.get(f"/responses/{done['id']}")).json()
        replay = await client.get(f"/responses/{done['id']}", params={"stream": "true", "starting_after": "1"})
    assert (streamed.status_code, streamed.json()["error"]["param"]) == (400, "stream")
    assert (cancelled.status_code, cancelled.json()["error"]["param"]) == (400, "response_id")
    assert done["status"] == "queued" and after["status"] == "completed" and after["background"] is True
    numbers = [
        int(line.split('"sequence_number":')[1].rstrip("}")) for line in replay.text.splitlines() if "data:" in line
    ]
    assert numbers and numbers == list(range(2, 2 + len(numbers)))


async def test_the_sweep_fails_the_runs_of_a_gone_server_and_leaves_a_live_ones(tmp_path: Path) -> None:
    store = SQLiteStore(str(tmp_path / "s.sqlite3"))
    here = socket.gethostname()
    runs = (
        ("resp_gone", f"{here}:999999999:1"),
        ("resp_old", "999999998:1"),  # recorded before runs named their machine
        ("resp_live", f"{here}:{os.getppid()}:{_start(os.getppid())}"),
        ("resp_elsewhere", "another-machine:1:1"),
    )
    for key, process in runs:
        await store.put(key, {"response": {"id": key, "status": "in_progress", "background": True}, "input_items": []})
        await store.put(key + RUN_SUFFIX, {"process": process, "done": False})
    assert await BackgroundRuns(store).recover() == 2
    gone, live = await store.get("resp_gone"), await store.get("resp_live")
    old, elsewhere = await store.get("resp_old"), await store.get("resp_elsewhere")
    assert old is not None and old["response"]["status"] == "failed"
    assert elsewhere is not None and elsewhere["response"]["status"] == "in_progress"  # not this machine's to judge
    assert (
        gone is not None
        and gone["response"]["status"] == "failed"
        and gone["response"]["error"]["code"] == "server_error"
    )
    assert live is not None and live["response"]["status"] == "in_progress"  # another worker's, still running
    assert await BackgroundRuns(store).recover() == 0


def _start(pid: int) -> str:
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        return stat.read().rsplit(")", 1)[1].split()[19]
