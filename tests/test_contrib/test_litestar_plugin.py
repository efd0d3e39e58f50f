"""The Litestar plugin: the mount, Ollama's routes at the root, and the lifespan it adds."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from asgi_lifespan import LifespanManager
from litestar import Litestar, get

from asgi_llm import LLMApp, ModelPool
from asgi_llm.adapters.anthropic import ANTHROPIC
from asgi_llm.adapters.openai import OPENAI
from asgi_llm.contrib.litestar import LLMConfig, LLMPlugin

pytestmark = pytest.mark.anyio
CHAT = {"model": "fake", "messages": [{"role": "user", "content": "hi"}]}


@get("/")
async def home() -> dict[str, str]:
    return {"hello": "litestar"}


@get("/api/mine")
async def mine() -> dict[str, str]:
    return {"mine": "yes"}


def make_app(pool: ModelPool, *, lifespan: list[Any] | None = None, **config: Any) -> Litestar:
    plugin = LLMPlugin(LLMConfig(**config))
    plugin.llm = LLMApp(pool=pool, adapters=(OPENAI, ANTHROPIC))  # the scripted model in place of the real one
    return Litestar(route_handlers=[home, mine], plugins=[plugin], lifespan=lifespan or [])


@contextlib.asynccontextmanager
async def serving(app: Litestar, pool: ModelPool) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with LifespanManager(app), httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
        assert pool.started  # by the lifespan, before any request
        await pool.wait_ready()
        yield client
    assert not pool.started and not pool.thread.alive


async def test_the_mount_serves_beside_the_host_routes(fake_pool: ModelPool) -> None:
    async with serving(make_app(fake_pool), fake_pool) as client:
        assert (await client.get("/")).json() == {"hello": "litestar"}
        for path in ("/v1/models", "/v1/models/"):
            assert (await client.get(path)).json()["data"][0]["id"] == "fake"
        chat = await client.post("/v1/chat/completions", json=CHAT)
        assert chat.json()["choices"][0]["message"]["content"] == "Hello there"
        messages = await client.post(
            "/v1/messages", json={**CHAT, "max_tokens": 8}, headers={"anthropic-version": "2023-06-01"}
        )
        assert messages.json()["content"][0]["text"] == "Hello there"
        assert (await client.get("/api/tags")).status_code == 404


async def test_a_custom_path(fake_pool: ModelPool) -> None:
    async with serving(make_app(fake_pool, path="/llm"), fake_pool) as client:
        assert (await client.get("/llm/models")).json()["data"][0]["id"] == "fake"
        assert (await client.get("/v1/models")).status_code == 404


async def test_ollama_routes_at_the_root_leave_the_host_routes_alone(fake_pool: ModelPool) -> None:
    async with serving(make_app(fake_pool, ollama_at_root=True), fake_pool) as client:
        for path in ("/api/tags", "/api/tags/"):
            assert (await client.get(path)).json()["models"][0]["name"] == "fake:latest"
        chat = await client.post("/api/chat", json={**CHAT, "stream": False})
        assert chat.json()["message"]["content"] == "Hello there"
        assert (await client.get("/api/mine")).json() == {"mine": "yes"}
        assert (await client.get("/")).json() == {"hello": "litestar"}


async def test_the_host_lifespan_still_runs(fake_pool: ModelPool) -> None:
    events: list[str] = []

    @contextlib.asynccontextmanager
    async def host_lifespan(app: Litestar) -> AsyncIterator[None]:
        events.append("host up")
        yield
        events.append("host down")

    async with serving(make_app(fake_pool, lifespan=[host_lifespan]), fake_pool):
        assert events == ["host up"]
    assert events == ["host up", "host down"]


@pytest.mark.parametrize("path", ["v1", "/", ""])
def test_a_malformed_path_is_refused(path: str) -> None:
    with pytest.raises(ValueError, match="path must start with '/'"):
        LLMConfig(path=path)
