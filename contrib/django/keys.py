"""The Django-backed key store: create, revoke, and verify keys (an auth verifier can await `verify_key`).

Keys are 256 random bits, so a SHA-256 digest is a safe thing to store and look up by;
a slow password hash would add nothing but latency to every request.
"""

from __future__ import annotations

import hashlib
import secrets

from typing import TYPE_CHECKING

from django.db import IntegrityError, transaction
from django.utils import timezone

from ...middleware import KeyInfo

if TYPE_CHECKING:
    from .models import APIKey

__all__ = ["KEY_PREFIX", "KeyExists", "create_key", "hash_key", "revoke_key", "verify_key"]

KEY_PREFIX = "sk-llm-"


class KeyExists(ValueError):
    """A key with that name exists already (revoked keys keep their name until deleted)."""


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def create_key(name: str, *, operator: bool = False) -> str:
    """Store a new key named `name` and return it; it is never shown again. An `operator` key
    may also read /metrics."""
    from .models import APIKey

    key = KEY_PREFIX + secrets.token_urlsafe(32)
    try:
        with transaction.atomic():
            APIKey.objects.create(name=name, hashed_key=hash_key(key), operator=operator)
    except IntegrityError:
        raise KeyExists(f"an API key named {name!r} exists already") from None
    return key


def revoke_key(name: str) -> bool:
    """Revoke the key named `name`; False when there is no such key still in force."""
    from .models import APIKey

    return APIKey.objects.filter(name=name, revoked__isnull=True).update(revoked=timezone.now()) > 0


async def database_key(key: str) -> KeyInfo | None:
    """A verifier for `LLMApp(verify=...)`: keys in force in the APIKey table, named by their name."""
    found = await _in_force(key)
    return KeyInfo(found.name, operator=found.operator) if found is not None else None


async def verify_key(key: str) -> str | None:
    """The name of the key in force that matches `key`, or None."""
    found = await _in_force(key)
    return found.name if found is not None else None


async def _in_force(key: str) -> APIKey | None:
    from .models import APIKey

    if not key.startswith(KEY_PREFIX):
        return None
    query = APIKey.objects.filter(hashed_key=hash_key(key), revoked__isnull=True).only("name", "operator")
    return await query.afirst()
