"""The Django-backed key store: create, revoke, and verify keys (an auth verifier can await `verify_key`).

The same format and check as `asgi-llm keys` (`asgi_llm.middleware.keyring`): `sk-llm-` and
256 random bits, of which only the SHA-256 is stored (a slow password hash would add nothing
but latency to every request); an expired key is a 401 that says so.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

from django.db import IntegrityError, transaction
from django.utils import timezone

from ...middleware import KeyInfo
from ...middleware.keyring import KEY_PREFIX, KeyExists, StoredKey, hash_key, identity_of, new_key

if TYPE_CHECKING:
    from .models import APIKey

__all__ = ["KEY_PREFIX", "KeyExists", "create_key", "hash_key", "revoke_key", "verify_key"]


def create_key(name: str, *, operator: bool = False, expires: dt.datetime | None = None) -> str:
    """Store a new key named `name` and return it; it is never shown again. An `operator` key
    may also read /metrics; from `expires` on, the key is refused."""
    from .models import APIKey

    key = new_key()
    try:
        with transaction.atomic():
            APIKey.objects.create(name=name, hashed_key=hash_key(key), operator=operator, expires=expires)
    except IntegrityError:
        raise KeyExists(f"an API key named {name!r} exists already") from None
    return key


def revoke_key(name: str) -> bool:
    """Revoke the key named `name`; False when there is no such key still in force."""
    from .models import APIKey

    return APIKey.objects.filter(name=name, revoked__isnull=True).update(revoked=timezone.now()) > 0


async def database_key(key: str) -> KeyInfo | None:
    """A verifier for `LLMApp(verify=...)`: keys in force in the APIKey table, named by their
    name; an expired key is a 401 saying so."""
    return identity_of(await _stored(key))


async def verify_key(key: str) -> str | None:
    """The name of the key in force (not revoked, not expired) that matches `key`, or None."""
    found = await _stored(key)
    return found.name if found is not None and found.status(dt.datetime.now(dt.UTC)) == "active" else None


async def _stored(key: str) -> StoredKey | None:
    from .models import APIKey

    if not key.startswith(KEY_PREFIX):
        return None
    row: APIKey | None = await APIKey.objects.filter(hashed_key=hash_key(key)).afirst()
    if row is None:
        return None
    created = _aware(row.created) or dt.datetime.now(dt.UTC)
    return StoredKey(row.name, row.hashed_key, created, _aware(row.expires), row.revoked, row.operator)


def _aware(value: dt.datetime | None) -> dt.datetime | None:
    """With `USE_TZ = False` Django hands back local naive times."""
    return value if value is None or timezone.is_aware(value) else timezone.make_aware(value)
