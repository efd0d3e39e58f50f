"""A request for a model that is loading waits for the load, whether the pool's start began it or
another request did (issue 39: one that found a startup model loading used to get a 503 at once):
up to the model's `queue_timeout`, then 503 with `Retry-After` in the caller's protocol while the
load goes on; a load that fails wakes every waiter with the failure; /health says `loading` until
the startup models are ready; a background Response made meanwhile waits the same way."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from asgi_llm import LLMApp, ModelConfig, ModelPool, Settings
from asgi_llm.adapters.anthropic import ANTHROPIC
from asgi_llm.adapters.openai import OPENAI
from asgi_llm.engines.fake import FakeEngine

pytestmark = pytest.mark.anyio
CHAT = {"model": "fake", "messages": [{"role": "user", "content": "hi"}]}
MESSAGES = {"model": "fake", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}


class _FailingLoad(FakeEngine):
    """Its load fails once its gate opens, as a missing or broken file would."""

    async def load(self) -> None:
        await super().load()
        raise OSError("the weights could not be read")


def gated_app(gate: asyncio.Event, *, engine: type[FakeEngine] = FakeEngine, **options: Any) -> LLMApp:
    """One model, "fake", whose load ends when `gate` is set; `options` for the model's config
    (`load`, `queue_timeout`), or the settings' when they name a settings field."""
    model = {k: v for k, v in options.items() if k in ModelConfig.model_fields}
    rest = {k: v for k, v in options.items() if k not in model}
    settings = Settings(models=(ModelConfig(id="fake", path="unused.gguf", **model),), **rest)
    pool = ModelPool(settings, engine_factory=lambda config, thread: engine(config, thread, loaded=gate))
    return LLMApp(pool=pool, adapters=(OPENAI, ANTHROPIC))


@contextlib.asynccontextmanager
async def serving(app: LLMApp, gate: asyncio.Event) -> AsyncIterator[httpx.AsyncClient]:
    """The app started, and a client; the gate opens on the way out whatever happened (a stop
    waits for the load in progress)."""
    async with app.lifespan():
        try:
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as http:
                yield http
        finally:
            gate.set()


async def _waiting(http: httpx.AsyncClient, path: str, body: dict[str, Any]) -> asyncio.Future[httpx.Response]:
    """The request sent, and seen to be waiting (not answered) a moment later."""
    answer = asyncio.ensure_future(http.post(path, json=body))
    await asyncio.sleep(0.05)
    assert not answer.done(), answer.result().text
    return answer


@pytest.mark.parametrize("load", ["startup", "lazy"])
async def test_a_request_waits_for_its_models_load_however_it_began(load: str) -> None:
    gate = asyncio.Event()
    app = gated_app(gate, load=load)
    async with serving(app, gate) as http:
        first = await _waiting(http, "/chat/completions", CHAT)
        second = await _waiting(http, "/messages", MESSAGES)  # one load, however many wait for it
        health = await http.get("/health")
        assert health.status_code == (503 if load == "startup" else 200)  # a startup model is not ready yet
        gate.set()
        answered = await first, await second
    assert answered[0].status_code == 200 and answered[0].json()["choices"][0]["message"]["content"] == "Hello there"
    assert answered[1].status_code == 200 and answered[1].json()["content"][0]["text"] == "Hello there"


async def test_a_wait_past_queue_timeout_is_a_503_with_retry_after_in_the_callers_protocol() -> None:
    gate = asyncio.Event()
    app = gated_app(gate, queue_timeout=0.2, retry_after_seconds=2)
    async with serving(app, gate) as http:
        began = time.monotonic()
        openai, anthropic = await asyncio.gather(
            http.post("/chat/completions", json=CHAT), http.post("/messages", json=MESSAGES)
        )
        waited = time.monotonic() - began
        health = await http.get("/health")
        gate.set()  # the load went on meanwhile: the next request is served
        await app.pool.wait_ready()
        served = await http.post("/chat/completions", json=CHAT)
    assert 0.2 <= waited < 2
    assert (openai.status_code, openai.headers["retry-after"]) == (503, "2")
    error = openai.json()["error"]
    assert error["code"] == "model_not_ready" and error["type"] == "server_error"
    assert error["message"] == "This request waited 0.2 s for the model 'fake' to load; retry shortly."
    assert (anthropic.status_code, anthropic.headers["retry-after"]) == (503, "2")
    assert anthropic.json()["type"] == "error" and anthropic.json()["error"]["type"] == "overloaded_error"
    assert "waited 0.2 s for the model 'fake' to load" in anthropic.json()["error"]["message"]
    assert health.status_code == 503 and health.json()["models"][0]["state"] == "loading"
    assert served.status_code == 200


@pytest.mark.parametrize("load", ["startup", "lazy"])
async def test_a_failed_load_wakes_every_waiter_with_the_failure(load: str) -> None:
    gate = asyncio.Event()
    app = gated_app(gate, engine=_FailingLoad, load=load, queue_timeout=30)
    async with serving(app, gate) as http:
        waiters = [await _waiting(http, "/chat/completions", CHAT) for _ in range(2)]
        began = time.monotonic()
        gate.set()
        answers = [await asyncio.wait_for(waiter, timeout=5) for waiter in waiters]
        woken = time.monotonic() - began
        health = await http.get("/health")
    assert woken < 2  # at once, not after queue_timeout
    for answer in answers:
        assert answer.status_code == 503 and "retry-after" in answer.headers
        assert answer.json()["error"]["message"] == "The model 'fake' failed to load."
    assert health.status_code == 503 and health.json()["models"] == [
        {"id": "fake", "state": "failed", "error": "OSError"}
    ]


async def test_a_background_response_made_during_the_startup_load_completes(tmp_path: Path) -> None:
    gate = asyncio.Event()
    app = gated_app(gate, state_store="sqlite", state_path=str(tmp_path / "state.sqlite3"))
    body = {"model": "fake", "input": "hi", "background": True}
    async with serving(app, gate) as http:
        made = await _waiting(http, "/responses", body)  # over ASGITransport the call ends with its run
        gate.set()
        queued = (await made).json()
        stored = (await http.get(f"/responses/{queued['id']}")).json()
    assert queued["status"] == "queued"
    assert stored["status"] == "completed", stored.get("error")
    assert stored["output"][0]["content"][0]["text"] == "Hello there"
