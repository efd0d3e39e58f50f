"""Stored API keys: one format and one check for every store (`asgi-llm keys`' SQLite table,
Django's `APIKey` model).

A key is `sk-llm-` and 256 random bits; a store keeps only its SHA-256 hex digest (a slow
password hash would add latency to every request and nothing else: the key is not guessable)
with its name, creation, expiry and revocation times and what it may do. Stores look a key up
by digest on every request, so a revoked key is refused on its next request; requests already
in flight finish.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import re
import secrets
from dataclasses import dataclass

from asgi_llm.core import Unauthorized
from asgi_llm.core.policy import KeyInfo, Limits

__all__ = ["KEY_PREFIX", "KeyExists", "StoredKey", "hash_key", "identity_of", "new_key", "parse_expiry"]

KEY_PREFIX = "sk-llm-"


class KeyExists(ValueError):
    """A key with that name exists already (revoked keys keep their name)."""


_DURATION = re.compile(r"(\d+)([mhdw])")
_UNITS = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_expiry(text: str, now: dt.datetime | None = None) -> dt.datetime:
    """`2027-01-01` (midnight UTC), an ISO date and time (UTC unless it says), or a duration
    from now: `90m`, `12h`, `30d`, `2w`."""
    now = now or dt.datetime.now(dt.UTC)
    found = _DURATION.fullmatch(text.strip())
    if found:
        return now + dt.timedelta(seconds=int(found.group(1)) * _UNITS[found.group(2)])
    try:
        when = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"expiry {text!r}: give a date (2027-01-01), a date and time, or 30d / 12h / 90m") from None
    return when.replace(tzinfo=dt.UTC) if when.tzinfo is None else when.astimezone(dt.UTC)


def new_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def hash_key(key: str) -> str:
    """What a store keeps of a key: its SHA-256, as 64 hex digits."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class StoredKey:
    """One stored key, never the key itself. Times are UTC."""

    name: str
    hashed_key: str
    created: dt.datetime
    expires: dt.datetime | None = None
    revoked: dt.datetime | None = None
    operator: bool = False
    models: tuple[str, ...] | None = None
    protocols: tuple[str, ...] | None = None
    limits: Limits | None = None

    def status(self, now: dt.datetime) -> str:
        """`active`, `revoked` or `expired`."""
        if self.revoked is not None:
            return "revoked"
        if self.expires is not None and self.expires <= now:
            return "expired"
        return "active"

    def identity(self) -> KeyInfo:
        return KeyInfo(
            name=self.name,
            models=None if self.models is None else frozenset(self.models),
            protocols=None if self.protocols is None else frozenset(self.protocols),
            limits=self.limits,
            operator=self.operator,
        )

    def limits_dict(self) -> dict[str, int] | None:
        if self.limits is None:
            return None
        return {k: v for k, v in dataclasses.asdict(self.limits).items() if v is not None}


def identity_of(found: StoredKey | None, now: dt.datetime | None = None) -> KeyInfo | None:
    """The check every store shares: a key in force is its identity; an unknown or revoked one
    is None (the auth layer's "Invalid API key"); an expired one is a 401 that says so."""
    if found is None:
        return None
    status = found.status(now or dt.datetime.now(dt.UTC))
    if status == "revoked":
        return None
    if status == "expired":
        assert found.expires is not None
        raise Unauthorized(f"This API key expired at {found.expires.strftime('%Y-%m-%dT%H:%M:%SZ')}.")
    return found.identity()
