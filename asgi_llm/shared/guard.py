"""How a request meets an unreachable shared backend: a bounded wait, then a 503 in its
protocol's envelope (fail closed, the default) or a logged warning and no limit (fail open).

Every call to Redis or PostgreSQL goes through `Guard.call`, which bounds it with a timeout and
turns whatever the client raises into one `Unavailable` whose message names the store, never
its address (the URL may hold a password).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio

from asgi_llm.core import Unavailable

__all__ = ["BackendDown", "Guard"]

log = logging.getLogger("asgi_llm.shared")

T = TypeVar("T")

_REST = 0.5
"""Seconds after a failure during which calls fail at once instead of each waiting out the
timeout again: an outage costs requests nothing but the answer; the first call after it retries."""
_WARN_EVERY = 10.0
"""Seconds between two warnings about one backend: an outage is one line every ten seconds, not one per request."""


class BackendDown(Unavailable):
    """A shared backend did not answer in time or at all."""


class Guard:
    """One backend's timeout and failure policy; `name` is what clients and logs call it."""

    def __init__(self, name: str, *, timeout: float, fail_open: bool) -> None:
        self.name = name
        self.timeout = timeout
        self.fail_open = fail_open
        self._warned = 0.0
        self._down_until = 0.0

    async def call(self, fn: Callable[[], Awaitable[T]]) -> T:
        """`await fn()` within the timeout, or `BackendDown`."""
        if time.monotonic() < self._down_until:
            raise self._down()
        try:
            with anyio.fail_after(self.timeout):
                return await fn()
        except BackendDown:
            raise
        except Exception as exc:  # noqa: BLE001 (any client error: refused, reset, timed out, read-only...)
            self._down_until = time.monotonic() + _REST
            self.warn(f"{self.name} is unreachable ({type(exc).__name__})")
            raise self._down() from None

    def _down(self) -> BackendDown:
        return BackendDown(f"The server's {self.name} is unreachable; try again shortly.", retry_after=1)

    def warn(self, what: str) -> None:
        now = time.monotonic()
        if now - self._warned >= _WARN_EVERY:
            self._warned = now
            policy = "serving without it (fail_open)" if self.fail_open else "refusing requests that need it (503)"
            log.warning("%s; %s", what, policy)
