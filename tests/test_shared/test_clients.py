"""One process holds one client per backend URL, whoever asks: an app's key store, ledger and
Responses store, the default layers built again by a host for an app of its own on the same pool,
and a sibling all share one PostgreSQL pool and one Redis client (the pool's `Clients`), and the
app's lifespan closes them once the pool has stopped with its last user."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import psycopg
import pytest

from asgi_llm import LimitsConfig, LLMApp, ModelConfig, ModelPool, Settings, default_middleware
from asgi_llm.adapters.ollama import OLLAMA
from asgi_llm.adapters.openai import OPENAI
from asgi_llm.engines.fake import FakeEngine
from asgi_llm.shared import postgres, redis_limits
from asgi_llm.support.clients import Clients

from .servers import PostgresServer, RedisServer

pytestmark = pytest.mark.anyio


@pytest.fixture
def database(postgres_server: PostgresServer) -> Iterator[str]:
    """A database of this test's own (no keys another test made), dropped after: which fails while
    a connection to it is still open."""
    name = f"clients_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_server.url, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    yield postgres_server.url.rsplit("/", 1)[0] + f"/{name}"
    with psycopg.connect(postgres_server.url, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE {name}")


def _connections(postgres_server: PostgresServer, url: str) -> int:
    with psycopg.connect(postgres_server.url, autocommit=True) as admin:
        row = admin.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (url.rsplit("/", 1)[1],))
        found = row.fetchone()
    assert found is not None
    return int(found[0])


async def test_one_pool_per_url_shared_by_every_part_and_closed_at_shutdown(
    postgres_server: PostgresServer, redis_server: RedisServer, database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    pools: list[Any] = []
    redis_clients: list[Any] = []

    class Counted(postgres.AsyncConnectionPool):  # type: ignore[misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            pools.append(self)

    made = redis_limits.redis_client

    def counted(url: str, timeout: float) -> Any:
        redis_clients.append(made(url, timeout))
        return redis_clients[-1]

    monkeypatch.setattr(postgres, "AsyncConnectionPool", Counted)
    monkeypatch.setattr(redis_limits, "redis_client", counted)
    settings = Settings(
        models=(ModelConfig(id="fake", path="fake.gguf"),),
        state_url=database,
        limits_url=redis_server.url,
        limits=LimitsConfig(requests_per_minute=1000),
    )
    pool = ModelPool(settings, engine_factory=lambda config, thread: FakeEngine(config))
    llm = LLMApp(pool=pool, adapters=(OPENAI,))
    host = LLMApp(pool=pool, adapters=(OPENAI,), middleware=[*default_middleware(pool)])  # a host's own stack
    twin = llm.sibling(OLLAMA)
    async with llm.lifespan(), host.lifespan(), twin.lifespan():
        await pool.wait_ready()
        for app in (llm, host):
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as http:
                stored = await http.post("/responses", json={"model": "fake", "input": "hi"})  # store, ledger, limits
                assert stored.status_code == 200, stored.text
                fetched = await http.get(f"/responses/{stored.json()['id']}")
                assert fetched.status_code == 200, fetched.text
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=twin), base_url="http://t") as http:
            assert (await http.post("/api/chat", json={"model": "fake", "messages": [], "stream": False})).is_success
        assert len(pools) == 1 and len(redis_clients) == 1 and pool.clients.made == 2
        assert _connections(postgres_server, database) >= 1
    assert pools[0].closed
    with anyio.fail_after(10):  # a server process leaves pg_stat_activity a moment after its client closed
        while _connections(postgres_server, database):
            await anyio.sleep(0.05)


async def test_closes_run_users_first_and_a_failure_leaves_the_rest() -> None:
    clients, closed = Clients(), []

    async def close(name: str) -> None:
        closed.append(name)
        if name == "ledger":
            raise OSError("flush failed")

    db = clients.get("postgresql", "pg://a", lambda: "db", lambda made: lambda: close(made))
    assert clients.get("postgresql", "pg://a", lambda: "another", lambda made: lambda: close(made)) is db
    clients.on_close(lambda: close("ledger"))
    clients.get("redis", "redis://b", lambda: "redis", lambda made: lambda: close(made))
    clients.on_close(lambda: close("gate"))
    await clients.aclose()
    assert closed == ["gate", "redis", "ledger", "db"] and clients.made == 2
