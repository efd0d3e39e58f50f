"""The SQLite ledger: usage records and token budgets that survive restarts.

Two tables: `usage`, one row per `UsageRecord` (it is a usage sink: `Ledger.record`), and
`spend`, tokens per key per UTC day (it is the limits layer's `BudgetStore`). Like the state
store: WAL and a busy timeout let several worker processes write one file, each write is
one `BEGIN IMMEDIATE` transaction, and the blocking calls run off the event loop.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import fields
from typing import Any, TypeVar

from asgi_llm.storage.sqlite import SQLiteFile

from .usage import UsageRecord

__all__ = ["DAY", "Ledger"]

T = TypeVar("T")
DAY = 86400

_COLUMNS = tuple(f.name for f in fields(UsageRecord))
_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS usage (
        id TEXT PRIMARY KEY, started REAL NOT NULL, key TEXT, protocol TEXT NOT NULL, endpoint TEXT NOT NULL,
        method TEXT NOT NULL, model TEXT, prompt_tokens INTEGER NOT NULL, completion_tokens INTEGER NOT NULL,
        cached_tokens INTEGER NOT NULL, time_to_first_token REAL, duration REAL NOT NULL, status INTEGER NOT NULL,
        disconnected INTEGER NOT NULL, request_id TEXT NOT NULL DEFAULT '')""",
    "CREATE INDEX IF NOT EXISTS usage_key_started ON usage (key, started)",
    """CREATE TABLE IF NOT EXISTS spend (
        key TEXT NOT NULL, day INTEGER NOT NULL, tokens INTEGER NOT NULL, PRIMARY KEY (key, day))""",
)


class Ledger:
    def __init__(self, path: str) -> None:
        self.path = path
        self._file = SQLiteFile(path)
        db = self._file.connect()
        with db:
            for statement in _SCHEMA:
                db.execute(statement)
            columns = {row[1] for row in db.execute("PRAGMA table_info(usage)")}
            if "request_id" not in columns:  # a ledger written before records had request ids
                db.execute("ALTER TABLE usage ADD COLUMN request_id TEXT NOT NULL DEFAULT ''")

    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        return await self._file.run(fn)

    async def record(self, record: UsageRecord) -> None:
        """A usage sink: one row per request."""
        values = tuple(getattr(record, name) for name in _COLUMNS)
        sql = f"INSERT INTO usage ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))})"

        def write(db: sqlite3.Connection) -> None:
            with db:
                db.execute("BEGIN IMMEDIATE")
                db.execute(sql, values)

        await self._run(write)

    async def records(self, *, key: str | None = None, since: float = 0.0, limit: int = 1000) -> list[UsageRecord]:
        """Recorded requests, oldest first; of one key's name if given."""
        where, args = "started >= ?", tuple[object, ...]((since,))
        if key is not None:
            where, args = where + " AND key = ?", (since, key)
        sql = f"SELECT {', '.join(_COLUMNS)} FROM usage WHERE {where} ORDER BY started, id LIMIT ?"

        def read(db: sqlite3.Connection) -> list[tuple[object, ...]]:
            return db.execute(sql, (*args, limit)).fetchall()

        rows = await self._run(read)
        return [_record(row) for row in rows]

    async def charge(self, key: str, tokens: int, at: float) -> None:
        """Adds `tokens` to `key`'s spend on the UTC day of `at`."""
        day = int(at // DAY) * DAY

        def write(db: sqlite3.Connection) -> None:
            with db:
                db.execute("BEGIN IMMEDIATE")
                db.execute(
                    "INSERT INTO spend (key, day, tokens) VALUES (?, ?, ?) "
                    "ON CONFLICT (key, day) DO UPDATE SET tokens = tokens + excluded.tokens",
                    (key, day, tokens),
                )

        await self._run(write)

    async def spent(self, key: str, since: float) -> int:
        """Tokens `key` spent on UTC days starting at or after `since` (a UTC midnight)."""

        def read(db: sqlite3.Connection) -> int:
            row = db.execute(
                "SELECT COALESCE(SUM(tokens), 0) FROM spend WHERE key = ? AND day >= ?", (key, since)
            ).fetchone()
            return int(row[0])

        return await self._run(read)


def _record(row: tuple[object, ...]) -> UsageRecord:
    values: dict[str, Any] = dict(zip(_COLUMNS, row))
    values["disconnected"] = bool(values["disconnected"])
    return UsageRecord(**values)
