"""API keys in PostgreSQL (`asgi-llm keys` with `state_url`), checked on every request by every process.

The table holds what `keyring.StoredKey` holds (the key's SHA-256, never the key). Each request
looks its key up, so a key revoked through any process, or by `asgi-llm keys revoke`, is refused
by every other one on its next request. While the database is unreachable, a key is refused with
a 503 (fail closed); with `fail_open`, a key seen in force within the last `remember` seconds
still works (an unknown one gets the 503), with a logged warning.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from asgi_llm.core.policy import KeyInfo, Limits
from asgi_llm.middleware.keyring import KEY_PREFIX, KeyExists, StoredKey, hash_key, identity_of, new_key

from .guard import BackendDown
from .postgres import PostgresDB

__all__ = ["PostgresKeys"]

_COLUMNS = "name, hashed_key, created, expires, revoked, operator, models, protocols, limits"
_REMEMBERED = 10_000


class PostgresKeys:
    """The key table of a shared database; itself a `Verifier` (`await keys(presented)`)."""

    def __init__(self, db: PostgresDB, *, remember: float = 3600.0) -> None:
        self.db = db
        self._remember = remember
        self._known: dict[str, tuple[float, StoredKey]] = {}  # digest -> last seen in force

    def holds_keys(self) -> bool:
        """Whether any key was ever made (revoked ones count); unreachable counts as yes (fail closed)."""
        try:
            with self.db.sync_connect() as db:
                return db.execute("SELECT 1 FROM asgi_llm_keys LIMIT 1").fetchone() is not None
        except (psycopg.Error, ConnectionError):
            return True

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
        stored = StoredKey(
            name, hash_key(key), dt.datetime.now(dt.UTC), expires, None, operator, models, protocols, limits
        )
        try:
            with self.db.sync_connect() as db:
                db.execute(f"INSERT INTO asgi_llm_keys ({_COLUMNS}) VALUES ({', '.join(['%s'] * 9)})", _row(stored))
        except psycopg.errors.UniqueViolation:
            raise KeyExists(f"an API key named {name!r} exists already") from None
        return key

    def list(self) -> list[StoredKey]:
        with self.db.sync_connect() as db:
            return [_stored(row) for row in db.execute(f"SELECT {_COLUMNS} FROM asgi_llm_keys ORDER BY name")]

    def revoke(self, name: str) -> bool:
        """Revoke the key named `name`; False when no such key is in force."""
        with self.db.sync_connect() as db:
            cursor = db.execute("UPDATE asgi_llm_keys SET revoked = now() WHERE name = %s AND revoked IS NULL", (name,))
            return cursor.rowcount > 0

    async def __call__(self, key: str) -> KeyInfo | None:
        if not key.startswith(KEY_PREFIX):
            return None
        digest = hash_key(key)

        async def find(db: psycopg.AsyncConnection[Any]) -> StoredKey | None:
            cursor = await db.execute(f"SELECT {_COLUMNS} FROM asgi_llm_keys WHERE hashed_key = %s", (digest,))
            row = await cursor.fetchone()
            return None if row is None else _stored(row)

        try:
            found = await self.db.run(find)
        except BackendDown:
            return self._last_known(digest)
        if found is not None and found.status(dt.datetime.now(dt.UTC)) == "active":
            if len(self._known) >= _REMEMBERED:
                self._known.pop(next(iter(self._known)))
            self._known[digest] = (time.monotonic(), found)
        else:
            self._known.pop(digest, None)
        return identity_of(found)

    def _last_known(self, digest: str) -> KeyInfo | None:
        seen = self._known.get(digest)
        if not self.db.guard.fail_open or seen is None or time.monotonic() - seen[0] > self._remember:
            raise BackendDown("The server's key store is unreachable; try again shortly.", retry_after=1)
        return identity_of(seen[1])


def _row(key: StoredKey) -> tuple[Any, ...]:
    return (
        key.name,
        key.hashed_key,
        key.created,
        key.expires,
        key.revoked,
        key.operator,
        None if key.models is None else Jsonb(list(key.models)),
        None if key.protocols is None else Jsonb(list(key.protocols)),
        None if key.limits is None else Jsonb(key.limits_dict()),
    )


def _stored(row: tuple[Any, ...]) -> StoredKey:
    name, hashed, created, expires, revoked, operator, models, protocols, limits = row
    return StoredKey(
        name=str(name),
        hashed_key=str(hashed),
        created=created,
        expires=expires,
        revoked=revoked,
        operator=bool(operator),
        models=None if models is None else tuple(_json(models)),
        protocols=None if protocols is None else tuple(_json(protocols)),
        limits=None if limits is None else Limits(**_json(limits)),
    )


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value
