"""Lifespan, lazy start, health and 503s, driven through the ASGI interface with a scripted engine."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import httpx
import pytest
from asgi_lifespan import LifespanManager
from starlette.applications import Starlette
from starlette.routing import Mount

from asgi_llm import LLMApp, ModelConfig, ModelPool, Settings
from asgi_llm.config import default_model_path
from asgi_llm.core import Overloaded
from asgi_llm.engines.fake import FakeEngine

pytestmark = pytest.mark.anyio
CHAT = {"model": "fake", "messages": [{"role": "user", "content": "hi"}]}


def fake_pool(**engine_options: Any) -> ModelPool:
    settings = Settings(models=(ModelConfig(id="fake", path="unused.gguf"),))
    return ModelPool(settings, engine_factory=lambda config, thread: FakeEngine(config, thread, **engine_options))


def client(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")


async def test_health_is_503_while_loading_then_200() -> None:
    gate = asyncio.Event()
    llm = LLMApp(pool=fake_pool(loaded=gate))
    async with llm.lifespan(), client(llm) as http:
        loading = await http.get("/health")
        assert loading.status_code == 503 and loading.json()["status"] == "loading"
        waiting = asyncio.ensure_future(http.post("/chat/completions", json=CHAT))  # waits for the load
        await asyncio.sleep(0.05)
        still = await http.get("/health")  # a request waiting on it does not make a loading model ready
        assert not waiting.done() and still.status_code == 503 and still.json()["status"] == "loading"
        models = await http.get("/models")
        assert models.status_code == 200 and models.json()["data"][0]["id"] == "fake"
        gate.set()
        await llm.pool.wait_ready()
        assert (await waiting).json()["choices"][0]["message"]["content"] == "Hello there"
        ready = await http.get("/health")
        assert ready.status_code == 200 and ready.json() == {"status": "ok", "models": [{"id": "fake", "state": "ready"}]}


async def test_failed_load_is_reported_without_details() -> None:
    def broken(config: ModelConfig, thread: Any) -> FakeEngine:
        raise OSError("/secret/path/model.gguf: no such file")

    llm = LLMApp(pool=ModelPool(Settings(models=(ModelConfig(id="fake", path="x.gguf"),)), engine_factory=broken))
    async with llm.lifespan(), client(llm) as http:
        with pytest.raises(RuntimeError):
            await llm.pool.wait_ready()
        health = await http.get("/health")
        assert health.status_code == 503
        assert health.json()["models"] == [{"id": "fake", "state": "failed", "error": "OSError"}]
        refused = await http.post("/chat/completions", json=CHAT)
        assert refused.status_code == 503 and "failed to load" in refused.json()["error"]["message"]
        assert "/secret" not in health.text + refused.text


async def test_overloaded_is_503_with_retry_after() -> None:
    llm = LLMApp(pool=fake_pool(error=Overloaded("Too many requests are waiting.", retry_after=2)))
    async with llm.lifespan(), client(llm) as http:
        await llm.pool.wait_ready()
        for stream in (False, True):
            response = await http.post("/chat/completions", json={**CHAT, "stream": stream})
            assert response.status_code == 503
            assert response.headers["retry-after"] == "2"
            assert response.json()["error"] == {
                "message": "Too many requests are waiting.",
                "type": "server_error",
                "param": None,
                "code": "overloaded",
                "request_id": response.headers["x-request-id"],
            }


async def test_lazy_start_when_the_host_does_not_forward_lifespan(caplog: pytest.LogCaptureFixture) -> None:
    llm = LLMApp(pool=fake_pool())
    host = Starlette(routes=[Mount("/v1", app=llm)])  # Starlette never sends lifespan to mounts
    async with LifespanManager(host), client(host) as http:
        assert not llm.pool.started
        first = await http.post("/v1/chat/completions", json=CHAT)  # starts the pool and waits for the load
        assert first.status_code == 200 and first.json()["choices"][0]["message"]["content"] == "Hello there"
        assert llm.pool.started and llm.pool.health()[0] == 200
    assert "lifespan was not forwarded" in caplog.text
    await llm.pool.stop()


async def test_lifespan_protocol_starts_and_stops_the_pool_leaving_no_thread() -> None:
    """No inference thread of this app's is left; one an earlier test's lazily started app (never
    shut down) still runs is not this test's to count."""
    before = set(threading.enumerate())
    llm = LLMApp(pool=fake_pool())
    async with LifespanManager(llm):
        assert llm.pool.started and llm.pool.thread.alive
    assert not llm.pool.started and not llm.pool.thread.alive
    assert [t for t in threading.enumerate() if t.name == "asgi-llm-inference" and t not in before] == []


async def test_two_apps_in_one_process_are_independent() -> None:
    first = LLMApp(pool=fake_pool(pieces=("one",)))
    second = LLMApp(pool=fake_pool(pieces=("two",)))
    async with first.lifespan(), second.lifespan(), client(first) as a, client(second) as b:
        await first.pool.wait_ready()
        await second.pool.wait_ready()
        one = (await a.post("/chat/completions", json=CHAT)).json()
        two = (await b.post("/chat/completions", json=CHAT)).json()
    assert one["choices"][0]["message"]["content"] == "one"
    assert two["choices"][0]["message"]["content"] == "two"


async def test_a_shared_pool_stops_with_its_last_app() -> None:
    pool = fake_pool()
    api, other = LLMApp(pool=pool), LLMApp(pool=pool)
    async with api.lifespan():
        async with other.lifespan():
            assert pool.started
        assert pool.started and pool.thread.alive
    assert not pool.started


async def test_root_path_and_trailing_slash() -> None:
    llm = LLMApp(pool=fake_pool())
    host = Starlette(routes=[Mount("/deep/prefix", app=llm)], lifespan=llm.lifespan)
    async with LifespanManager(host), client(host) as http:
        await llm.pool.wait_ready()
        for path in ("/deep/prefix/models", "/deep/prefix/models/", "/deep/prefix/models/fake/"):
            response = await http.get(path)
            assert response.status_code == 200, path


async def test_unknown_model_never_falls_back() -> None:
    llm = LLMApp(pool=fake_pool())
    async with llm.lifespan(), client(llm) as http:
        await llm.pool.wait_ready()
        response = await http.post("/chat/completions", json={**CHAT, "model": "other"})
    assert response.status_code == 404 and response.json()["error"]["code"] == "model_not_found"



class _Broken(FakeEngine):
    """An engine with a bug: the server must answer 500 without leaking what went wrong."""

    def generate(self, request: Any) -> Any:
        async def fail() -> Any:
            raise RuntimeError("/srv/secret/model.gguf: sk-live-key exploded")
            yield  # pragma: no cover

        return fail()


async def test_unexpected_errors_are_500_without_details(caplog: pytest.LogCaptureFixture) -> None:
    settings = Settings(models=(ModelConfig(id="fake", path="unused.gguf"),))
    llm = LLMApp(pool=ModelPool(settings, engine_factory=lambda config, thread: _Broken(config)))
    async with llm.lifespan(), client(llm) as http:
        await llm.pool.wait_ready()
        for stream in (False, True):
            response = await http.post("/chat/completions", json={**CHAT, "stream": stream})
            assert response.status_code == 500
            assert response.json()["error"]["type"] == "server_error"
            assert "secret" not in response.text and "sk-live" not in response.text and "Traceback" not in response.text
    assert "exploded" in caplog.text  # the operator still sees it in the log


async def test_the_catalog_describes_a_lazy_model_from_its_file_before_any_load() -> None:
    models = (
        ModelConfig(id="lazy", path=default_model_path(), load="lazy"),
        ModelConfig(id="remote", base_url="http://127.0.0.1:9/v1", load="lazy"),
        ModelConfig(id="missing", path="/nowhere/model.gguf", load="lazy"),
    )
    pool = ModelPool(Settings(models=models), engine_factory=lambda config, thread: FakeEngine(config, thread))
    assert all(card.facts.parameters == 0 for card in pool.catalog())  # read at start, not at construction
    await pool.start()
    try:
        lazy, remote, missing = pool.catalog()
        assert lazy.state == "unloaded"
        assert (lazy.facts.architecture, lazy.facts.file_type, lazy.facts.parameters) == ("llama", "Q4_1", 134_515_008)
        assert remote.facts.architecture == missing.facts.architecture == ""
    finally:
        await pool.stop()
