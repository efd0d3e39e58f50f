"""One PostgreSQL database shared by every process: a psycopg 3 async pool, opened on first use.

The pool is made in the event loop that first needs it, and checks each connection as it lends
it out, so a restarted server costs the requests in flight at that moment and no later ones.
The tables (keys, usage, spend, state) are created on the first call that reaches the database,
so a server starts, and answers 503, while PostgreSQL is still coming up. `sync_connect` is for
the `asgi-llm keys` command, which has no event loop.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio
import psycopg
from psycopg_pool import AsyncConnectionPool

from .guard import Guard

__all__ = ["SCHEMA", "PostgresDB"]

T = TypeVar("T")

SCHEMA = (
    """CREATE TABLE IF NOT EXISTS asgi_llm_keys (
        name TEXT PRIMARY KEY, hashed_key TEXT NOT NULL UNIQUE, created TIMESTAMPTZ NOT NULL, expires TIMESTAMPTZ,
        revoked TIMESTAMPTZ, operator BOOLEAN NOT NULL DEFAULT FALSE, models JSONB, protocols JSONB, limits JSONB)""",
    """CREATE TABLE IF NOT EXISTS asgi_llm_usage (
        id TEXT PRIMARY KEY, started DOUBLE PRECISION NOT NULL, key TEXT, protocol TEXT NOT NULL,
        endpoint TEXT NOT NULL, method TEXT NOT NULL, model TEXT, prompt_tokens INTEGER NOT NULL,
        completion_tokens INTEGER NOT NULL, cached_tokens INTEGER NOT NULL, time_to_first_token DOUBLE PRECISION,
        duration DOUBLE PRECISION NOT NULL, status INTEGER NOT NULL, disconnected BOOLEAN NOT NULL,
        request_id TEXT NOT NULL DEFAULT '')""",
    "CREATE INDEX IF NOT EXISTS asgi_llm_usage_key_started ON asgi_llm_usage (key, started)",
    """CREATE TABLE IF NOT EXISTS asgi_llm_spend (
        key TEXT NOT NULL, day BIGINT NOT NULL, tokens BIGINT NOT NULL, PRIMARY KEY (key, day))""",
    """CREATE TABLE IF NOT EXISTS asgi_llm_state (
        key TEXT PRIMARY KEY, value JSONB NOT NULL, created DOUBLE PRECISION NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS asgi_llm_state_created ON asgi_llm_state (created)",
)
_SCHEMA_LOCK = 7_204_617_201
"""An advisory lock id: processes starting together create the tables one after another."""


class PostgresDB:
    """The database at `url`, shared by the key store, the ledger and the Responses store of one app."""

    def __init__(self, url: str, guard: Guard, *, max_size: int = 10) -> None:
        self.url = url
        self.guard = guard
        self._max_size = max_size
        self._pool: AsyncConnectionPool | None = None
        self._ready = False
        self._lock = anyio.Lock()

    async def run(self, fn: Callable[[psycopg.AsyncConnection[Any]], Awaitable[T]]) -> T:
        """`await fn(connection)` in a transaction, within the guard's timeout, or `BackendDown`."""

        async def call() -> T:
            pool = await self._opened()
            async with pool.connection() as db:
                if not self._ready:
                    await self._create(db)
                return await fn(db)

        return await self.guard.call(call)

    async def aclose(self) -> None:
        if self._pool is not None:
            pool, self._pool = self._pool, None
            await pool.close()

    def sync_connect(self) -> psycopg.Connection[Any]:
        """A plain connection, the tables made (for `asgi-llm keys`); `ConnectionError` if none answers."""
        try:
            db = psycopg.connect(self.url, connect_timeout=max(int(self.guard.timeout), 1), autocommit=True)
        except psycopg.OperationalError:
            raise ConnectionError("the database did not answer") from None
        with db.transaction():
            db.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
            for statement in SCHEMA:
                db.execute(statement)
        return db

    async def _opened(self) -> AsyncConnectionPool:
        async with self._lock:
            if self._pool is None:
                timeout = self.guard.timeout
                pool = AsyncConnectionPool(
                    self.url,
                    min_size=1,
                    max_size=self._max_size,
                    open=False,
                    timeout=timeout,
                    kwargs={"connect_timeout": max(int(timeout), 1), "autocommit": True},
                    check=AsyncConnectionPool.check_connection,
                )
                await pool.open(wait=False)
                self._pool = pool
            return self._pool

    async def _create(self, db: psycopg.AsyncConnection[Any]) -> None:
        async with db.transaction():
            await db.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
            for statement in SCHEMA:
                await db.execute(statement)
        self._ready = True
