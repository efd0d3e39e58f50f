"""One SQLite file shared by threads and worker processes: WAL, a busy timeout, calls off the loop.

Writers from several processes on one machine wait for each other instead of failing;
each thread keeps its own connection (sqlite3 connections are not shared across threads).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from typing import TypeVar

import anyio

__all__ = ["SQLiteFile"]

T = TypeVar("T")


class SQLiteFile:
    def __init__(self, path: str) -> None:
        self.path = path
        self._local = threading.local()

    def connect(self) -> sqlite3.Connection:
        """This thread's connection, in autocommit mode (use `BEGIN IMMEDIATE` to write)."""
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        if db is None:
            db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA busy_timeout=30000")
            db.execute("PRAGMA synchronous=NORMAL")  # WAL stays consistent; a power cut may lose the last commits
            self._local.db = db
        return db

    async def run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run `fn` with a connection on a worker thread (these calls never touch a model)."""
        return await anyio.to_thread.run_sync(lambda: fn(self.connect()))
