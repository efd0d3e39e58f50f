"""The usage ledger and token budgets in PostgreSQL, shared by every process.

Like the SQLite `Ledger`: a usage sink (`record`, one row per request) and the limits layer's
`BudgetStore` (`charge`, `spent`: tokens per key per UTC day, added with `INSERT ... ON
CONFLICT DO UPDATE`, so concurrent processes never lose a charge). What is written while the
database is unreachable is kept in memory (bounded) and written, oldest first, once it answers
again: by the next write, or by a retry every second until the backlog is empty.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from dataclasses import fields
from typing import Any

import anyio
import psycopg

from asgi_llm.middleware.ledger import DAY
from asgi_llm.middleware.usage import UsageRecord

from ..support.tasks import spawn
from .guard import BackendDown
from .postgres import PostgresDB

log = logging.getLogger("asgi_llm.shared")

__all__ = ["PostgresLedger"]

_COLUMNS = tuple(f.name for f in fields(UsageRecord))
_INSERT = (
    f"INSERT INTO asgi_llm_usage ({', '.join(_COLUMNS)}) VALUES ({', '.join(['%s'] * len(_COLUMNS))}) "
    "ON CONFLICT (id) DO NOTHING"
)
_CHARGE = (
    "INSERT INTO asgi_llm_spend (key, day, tokens) VALUES (%s, %s, %s) "
    "ON CONFLICT (key, day) DO UPDATE SET tokens = asgi_llm_spend.tokens + excluded.tokens"
)
_BACKLOG = 100_000
_RETRY_SECONDS = 1.0

Write = tuple[str, tuple[Any, ...]]


class PostgresLedger:
    def __init__(self, db: PostgresDB) -> None:
        self.db = db
        self._backlog: deque[Write] = deque(maxlen=_BACKLOG)
        self._retrying: asyncio.Task[None] | None = None
        self._flushing = anyio.Lock()  # one writer of the backlog at a time: no charge written twice

    @property
    def backlog(self) -> int:
        """Writes waiting for the database to come back."""
        return len(self._backlog)

    async def record(self, record: UsageRecord) -> None:
        """A usage sink: one row per request (kept while the database is away)."""
        await self._write((_INSERT, tuple(getattr(record, name) for name in _COLUMNS)))

    async def charge(self, key: str, tokens: int, at: float) -> None:
        """Adds `tokens` to `key`'s spend on the UTC day of `at` (kept while the database is away)."""
        await self._write((_CHARGE, (key, int(at // DAY) * DAY, tokens)))

    async def spent(self, key: str, since: float) -> int:
        """Tokens `key` spent on UTC days starting at or after `since`, with what waits to be written."""

        async def read(db: psycopg.AsyncConnection[Any]) -> int:
            cursor = await db.execute(
                "SELECT COALESCE(SUM(tokens), 0) FROM asgi_llm_spend WHERE key = %s AND day >= %s", (key, int(since))
            )
            row = await cursor.fetchone()
            return int(row[0]) if row is not None else 0

        waiting = sum(args[2] for sql, args in self._backlog if sql is _CHARGE and args[0] == key and args[1] >= since)
        return int(await self.db.run(read)) + int(waiting)

    async def records(self, *, key: str | None = None, since: float = 0.0, limit: int = 1000) -> list[UsageRecord]:
        """Recorded requests, oldest first; of one key's name if given."""
        where, args = "started >= %s", list[object]([since])
        if key is not None:
            where, args = where + " AND key = %s", [since, key]
        sql = f"SELECT {', '.join(_COLUMNS)} FROM asgi_llm_usage WHERE {where} ORDER BY started, id LIMIT %s"

        async def read(db: psycopg.AsyncConnection[Any]) -> list[UsageRecord]:
            cursor = await db.execute(sql, (*args, limit))
            return [UsageRecord(**dict(zip(_COLUMNS, row))) for row in await cursor.fetchall()]

        return await self.db.run(read)

    async def aclose(self) -> None:
        if self._retrying is not None:
            self._retrying.cancel()
            with contextlib.suppress(BaseException):
                await self._retrying
            self._retrying = None
        with contextlib.suppress(BackendDown):
            await self._flush()

    async def _write(self, write: Write) -> None:
        self._backlog.append(write)
        if self._retrying is not None and not self._retrying.done():
            return  # the database is away: the retry writes it, and this request does not wait
        try:
            await self._flush()
        except BackendDown:
            if self._retrying is None or self._retrying.done():
                # outlives the request that starts it (ARCHITECTURE.md: tasks a task group would change)
                self._retrying = spawn(self._retry(), name="usage ledger retry", log=log)

    async def _flush(self) -> None:
        """Writes the backlog, oldest first, each batch in one transaction."""
        async with self._flushing:
            await self._flush_batches()

    async def _flush_batches(self) -> None:
        while self._backlog:
            batch = list(self._backlog)[:500]

            async def write(db: psycopg.AsyncConnection[Any], batch: list[Write] = batch) -> None:
                async with db.transaction(), db.cursor() as cursor:
                    for sql, args in batch:
                        await cursor.execute(sql, args)

            await self.db.run(write)
            for _ in batch:
                self._backlog.popleft()

    async def _retry(self) -> None:
        while self._backlog:
            await asyncio.sleep(_RETRY_SECONDS)
            with contextlib.suppress(BackendDown):
                await self._flush()
