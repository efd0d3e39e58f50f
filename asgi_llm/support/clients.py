"""The clients of the services outside the process (Redis, PostgreSQL) that one pool's apps
share: one client a service and URL, made on the first ask (so the layers, the key store, the
ledger and the Responses store built from one settings share it), and closed together, once,
by the app's lifespan when the pool has stopped with its last user. What is built on a client
and must finish before it closes (a ledger's unwritten records, a gate's leases) registers
its own close: closes run in the reverse order of registration, users before their clients."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar, cast

__all__ = ["Clients"]

log = logging.getLogger("asgi_llm.shared")

T = TypeVar("T")
Close = Callable[[], Awaitable[None]]


class Clients:
    """One client per (service, URL)."""

    def __init__(self) -> None:
        self._made: dict[tuple[str, str], object] = {}
        self._closes: list[Close] = []

    def get(self, service: str, url: str, make: Callable[[], T], close: Callable[[T], Close]) -> T:
        """The client of `service` at `url`: made by `make()` on the first ask, closed by
        `close(client)()` at `aclose`."""
        key = (service, url)
        if key not in self._made:
            client = make()
            self._made[key] = client
            self._closes.append(close(client))
        return cast(T, self._made[key])

    def on_close(self, close: Close) -> None:
        """`close` is awaited at `aclose`, before the clients asked for until now."""
        self._closes.append(close)

    @property
    def made(self) -> int:
        """How many clients are held now."""
        return len(self._made)

    async def aclose(self) -> None:
        """Close what was registered, last first; a failure is logged and the rest still close.
        The clients stay held: one used again (a pool started again) reopens its connections,
        and the next `aclose` closes them again."""
        for close in reversed(self._closes):
            try:
                await close()
            except Exception:
                log.exception("closing a shared backend's client failed")
