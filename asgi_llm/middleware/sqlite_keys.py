"""API keys in a SQLite file (`asgi-llm keys create|list|revoke`), checked on every request.

The table keeps what `keyring.StoredKey` holds — the key's SHA-256, never the key — so the
same check serves it and Django's `APIKey` model. Like the ledger, it may be the state file
other stores use: WAL and a busy timeout let the CLI write while servers read.
"""

from __future__ import annotations

import datetime as dt
import json
import sqlite3
from pathlib import Path
from typing import Any

from asgi_llm.core.policy import KeyInfo, Limits
from asgi_llm.storage.sqlite import SQLiteFile

from .keyring import KEY_PREFIX, KeyExists, StoredKey, hash_key, identity_of, new_key

__all__ = ["SQLiteKeys"]

_SCHEMA = """CREATE TABLE IF NOT EXISTS api_keys (
    name TEXT PRIMARY KEY, hashed_key TEXT NOT NULL UNIQUE, created TEXT NOT NULL, expires TEXT, revoked TEXT,
    operator INTEGER NOT NULL DEFAULT 0, models TEXT, protocols TEXT, limits TEXT)"""
_COLUMNS = "name, hashed_key, created, expires, revoked, operator, models, protocols, limits"


class SQLiteKeys:
    """The key table of one SQLite file; itself a `Verifier` (`await keys(presented)`)."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self._file = SQLiteFile(self.path)
        with self._file.connect() as db:
            db.execute(_SCHEMA)

    @staticmethod
    def holds_keys(path: str | Path) -> bool:
        """Whether the file exists and has keys made by `asgi-llm keys` (revoked ones count:
        a server whose keys were all revoked must still refuse everyone). Creates nothing."""
        if not Path(path).is_file():
            return False
        db = sqlite3.connect(path, timeout=30)
        try:
            table = db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'api_keys'").fetchone()
            return table is not None and db.execute("SELECT 1 FROM api_keys LIMIT 1").fetchone() is not None
        except sqlite3.DatabaseError:
            raise ValueError(f"{path} is not an SQLite file") from None
        finally:
            db.close()

    def create(
        self,
        name: str,
        *,
        expires: dt.datetime | None = None,
        operator: bool = False,
        models: tuple[str, ...] | None = None,
        protocols: tuple[str, ...] | None = None,
        limits: Limits | None = None,
    ) -> str:
        """Store a new key named `name` and return it: the only time it is shown."""
        key = new_key()
        now = dt.datetime.now(dt.UTC)
        stored = StoredKey(name, hash_key(key), now, expires, None, operator, models, protocols, limits)
        db = self._file.connect()
        try:
            with db:
                db.execute("BEGIN IMMEDIATE")
                db.execute(f"INSERT INTO api_keys ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", _row(stored))
        except sqlite3.IntegrityError:
            raise KeyExists(f"an API key named {name!r} exists already") from None
        return key

    def list(self) -> list[StoredKey]:
        rows = self._file.connect().execute(f"SELECT {_COLUMNS} FROM api_keys ORDER BY name").fetchall()
        return [_stored(row) for row in rows]

    def revoke(self, name: str) -> bool:
        """Revoke the key named `name`; False when no such key is in force."""
        db = self._file.connect()
        with db:
            db.execute("BEGIN IMMEDIATE")
            changed = db.execute(
                "UPDATE api_keys SET revoked = ? WHERE name = ? AND revoked IS NULL",
                (_time(dt.datetime.now(dt.UTC)), name),
            ).rowcount
        return changed > 0

    def find(self, key: str) -> StoredKey | None:
        return _find(self._file.connect(), key)

    async def __call__(self, key: str) -> KeyInfo | None:
        """Read per request (off the event loop): revoking or expiring takes effect at once."""
        if not key.startswith(KEY_PREFIX):
            return None
        return identity_of(await self._file.run(lambda db: _find(db, key)))


def _find(db: sqlite3.Connection, key: str) -> StoredKey | None:
    if not key.startswith(KEY_PREFIX):
        return None
    row = db.execute(f"SELECT {_COLUMNS} FROM api_keys WHERE hashed_key = ?", (hash_key(key),)).fetchone()
    return None if row is None else _stored(row)


def _time(value: dt.datetime | None) -> str | None:
    return None if value is None else value.astimezone(dt.UTC).isoformat()


def _parse_time(value: Any) -> dt.datetime | None:
    return None if value is None else dt.datetime.fromisoformat(str(value))


def _row(key: StoredKey) -> tuple[Any, ...]:
    return (
        key.name,
        key.hashed_key,
        _time(key.created),
        _time(key.expires),
        _time(key.revoked),
        int(key.operator),
        None if key.models is None else json.dumps(list(key.models)),
        None if key.protocols is None else json.dumps(list(key.protocols)),
        None if key.limits is None else json.dumps(key.limits_dict()),
    )


def _stored(row: tuple[Any, ...]) -> StoredKey:
    name, hashed, created, expires, revoked, operator, models, protocols, limits = row
    return StoredKey(
        name=str(name),
        hashed_key=str(hashed),
        created=_parse_time(created) or dt.datetime.now(dt.UTC),
        expires=_parse_time(expires),
        revoked=_parse_time(revoked),
        operator=bool(operator),
        models=None if models is None else tuple(json.loads(models)),
        protocols=None if protocols is None else tuple(json.loads(protocols)),
        limits=None if limits is None else Limits(**json.loads(limits)),
    )
