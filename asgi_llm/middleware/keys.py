"""API keys: a store that checks them in constant time, and the verifier contract.

Keys are kept only as SHA-256 digests; a presented key is hashed and compared with every
stored digest by `hmac.compare_digest`, without stopping at the first match, so the time a
check takes says nothing about which key (or how much of one) matched.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Awaitable, Callable, Iterable

from asgi_llm.core.policy import KeyInfo

__all__ = ["KeyStore", "Verifier"]

Verifier = Callable[[str], Awaitable[KeyInfo | None]]
"""`async def verify(key) -> KeyInfo | None`: a host checks keys against its own user store."""


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8")).digest()


class KeyStore:
    """The configured keys, as digests. It is itself a `Verifier`."""

    def __init__(self, keys: Iterable[tuple[str, KeyInfo]] = ()) -> None:
        self._entries: list[tuple[bytes, KeyInfo]] = []
        names: set[str] = set()
        for key, info in keys:
            if not key:
                raise ValueError("an API key is empty")
            if info.name in names:
                raise ValueError(f"API key name {info.name!r} is used twice")
            names.add(info.name)
            self._entries.append((_digest(key), info))

    def __len__(self) -> int:
        return len(self._entries)

    async def __call__(self, key: str) -> KeyInfo | None:
        presented = _digest(key)
        found: KeyInfo | None = None
        for digest, info in self._entries:
            if hmac.compare_digest(digest, presented) and found is None:
                found = info
        return found
