"""Stores for protocol state (stored Responses): in memory, or SQLite to survive restarts.

Both are bounded by count and age. SQLite may be shared by several worker processes on
one machine: WAL mode and a busy timeout make concurrent writers wait, not fail.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, TypeVar

from ..core import SharedStateStore, StateStore
from .sqlite import SQLiteFile

__all__ = ["MemoryStore", "OwnedStore", "SQLiteStore", "owned_by"]

T = TypeVar("T")


class MemoryStore:
    def __init__(
        self, *, max_items: int = 1000, max_age_seconds: float = 30 * 86400, clock: Callable[[], float] = time.time
    ) -> None:
        self._items: OrderedDict[str, tuple[float, dict[str, Any]]] = OrderedDict()
        self._max_items = max_items
        self._max_age = max_age_seconds
        self._clock = clock

    async def get(self, key: str) -> dict[str, Any] | None:
        entry = self._items.get(key)
        if entry is None:
            return None
        if self._clock() - entry[0] > self._max_age:
            del self._items[key]
            return None
        copy: dict[str, Any] = json.loads(json.dumps(entry[1]))  # callers never get our object
        return copy

    async def put(self, key: str, value: dict[str, Any]) -> None:
        self._items[key] = (self._clock(), json.loads(json.dumps(value)))
        self._items.move_to_end(key)
        while len(self._items) > self._max_items:
            self._items.popitem(last=False)

    async def delete(self, key: str) -> bool:
        return self._items.pop(key, None) is not None


class SQLiteStore(SharedStateStore):
    """Blocking sqlite3 calls run off the event loop (they never touch a model). It outlives the
    process, and the workers of one machine share it: background Responses may be kept here."""

    def __init__(
        self,
        path: str,
        *,
        max_items: int = 10000,
        max_age_seconds: float = 30 * 86400,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._path = path
        self._max_items = max_items
        self._max_age = max_age_seconds
        self._clock = clock
        self._file = SQLiteFile(path)
        with self._file.connect() as db:
            db.execute(
                "CREATE TABLE IF NOT EXISTS state (key TEXT PRIMARY KEY, value TEXT NOT NULL, created REAL NOT NULL)"
            )
            db.execute("CREATE INDEX IF NOT EXISTS state_created ON state (created)")

    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        return await self._file.run(fn)

    async def get(self, key: str) -> dict[str, Any] | None:
        oldest = self._clock() - self._max_age

        def read(db: sqlite3.Connection) -> str | None:
            row = db.execute("SELECT value FROM state WHERE key = ? AND created >= ?", (key, oldest)).fetchone()
            return None if row is None else str(row[0])

        text = await self._run(read)
        if text is None:
            return None
        value: dict[str, Any] = json.loads(text)
        return value

    async def put(self, key: str, value: dict[str, Any]) -> None:
        text = json.dumps(value, separators=(",", ":"))
        now = self._clock()

        def write(db: sqlite3.Connection) -> None:
            with db:
                db.execute("BEGIN IMMEDIATE")
                db.execute("INSERT OR REPLACE INTO state (key, value, created) VALUES (?, ?, ?)", (key, text, now))
                db.execute("DELETE FROM state WHERE created < ?", (now - self._max_age,))
                db.execute(
                    "DELETE FROM state WHERE key IN (SELECT key FROM state ORDER BY created DESC LIMIT -1 OFFSET ?)",
                    (self._max_items,),
                )

        await self._run(write)

    async def delete(self, key: str) -> bool:
        def remove(db: sqlite3.Connection) -> bool:
            return db.execute("DELETE FROM state WHERE key = ?", (key,)).rowcount > 0

        return await self._run(remove)

    async def scan(self, suffix: str) -> list[tuple[str, dict[str, Any]]]:
        """Every entry whose key ends with `suffix` (every owner's): for a sweep at startup."""
        pattern = "%" + suffix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")

        def read(db: sqlite3.Connection) -> list[tuple[str, str]]:
            return db.execute("SELECT key, value FROM state WHERE key LIKE ? ESCAPE '\\'", (pattern,)).fetchall()

        return [(key, json.loads(value)) for key, value in await self._run(read)]


class OwnedStore:
    """One API key's view of a shared store: what another key stored is simply not there, so a
    stored Response can be read, continued or deleted only with the key that created it."""

    def __init__(self, store: StateStore, owner: str) -> None:
        self._store = store
        # a digest has no ':', so no owner's prefix plus id can spell another owner's entry
        self._prefix = hashlib.sha256(owner.encode("utf-8")).hexdigest()[:32] + ":"

    async def get(self, key: str) -> dict[str, Any] | None:
        return await self._store.get(self._prefix + key)

    async def put(self, key: str, value: dict[str, Any]) -> None:
        await self._store.put(self._prefix + key, value)

    async def delete(self, key: str) -> bool:
        return await self._store.delete(self._prefix + key)


def owned_by(store: StateStore, owner: str | None) -> StateStore:
    """`store` as `owner` (a key's name) sees it; without authentication, the whole store."""
    return store if owner is None else OwnedStore(store, owner)
