"""Stored Responses in PostgreSQL: a `StateStore` every process reads and writes.

A Response stored through one process is retrieved, continued (`previous_response_id`) or
deleted through any other. Bounded like the SQLite store, by count and age. While the database
is unreachable, the guard's `BackendDown` (a 503) reaches the client: a Response cannot be
stored or read from memory without breaking its promise to the other processes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from ..core import SharedStateStore
from .postgres import PostgresDB

__all__ = ["PostgresStore"]


class PostgresStore(SharedStateStore):
    """Every process of every machine on the database shares it: background Responses may be kept here."""

    def __init__(
        self,
        db: PostgresDB,
        *,
        max_items: int = 10000,
        max_age_seconds: float = 30 * 86400,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.db = db
        self._max_items = max_items
        self._max_age = max_age_seconds
        self._clock = clock

    async def get(self, key: str) -> dict[str, Any] | None:
        oldest = self._clock() - self._max_age

        async def read(db: psycopg.AsyncConnection[Any]) -> dict[str, Any] | None:
            cursor = await db.execute(
                "SELECT value FROM asgi_llm_state WHERE key = %s AND created >= %s", (key, oldest)
            )
            row = await cursor.fetchone()
            return None if row is None else dict(row[0])

        return await self.db.run(read)

    async def put(self, key: str, value: dict[str, Any]) -> None:
        now = self._clock()

        async def write(db: psycopg.AsyncConnection[Any]) -> None:
            async with db.transaction():
                await db.execute(
                    "INSERT INTO asgi_llm_state (key, value, created) VALUES (%s, %s, %s) "
                    "ON CONFLICT (key) DO UPDATE SET value = excluded.value, created = excluded.created",
                    (key, Jsonb(value), now),
                )
                await db.execute("DELETE FROM asgi_llm_state WHERE created < %s", (now - self._max_age,))
                await db.execute(
                    "DELETE FROM asgi_llm_state WHERE key IN "
                    "(SELECT key FROM asgi_llm_state ORDER BY created DESC OFFSET %s)",
                    (self._max_items,),
                )

        await self.db.run(write)

    async def delete(self, key: str) -> bool:
        async def remove(db: psycopg.AsyncConnection[Any]) -> bool:
            cursor = await db.execute("DELETE FROM asgi_llm_state WHERE key = %s", (key,))
            return cursor.rowcount > 0

        return await self.db.run(remove)

    async def scan(self, suffix: str) -> list[tuple[str, dict[str, Any]]]:
        pattern = "%" + suffix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")

        async def read(db: psycopg.AsyncConnection[Any]) -> list[tuple[str, dict[str, Any]]]:
            cursor = await db.execute("SELECT key, value FROM asgi_llm_state WHERE key LIKE %s", (pattern,))
            return [(str(key), dict(value)) for key, value in await cursor.fetchall()]

        return await self.db.run(read)
