"""The requests a model serves, seen from the event loop, and the watchdog that keeps them from
waiting on a model that makes no progress: a stall answers them all with a 503 at once,
whatever the inference thread is doing, and has the model restart."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterator

import anyio

from ...core.errors import ModelNotReady
from ...support.tasks import cancel_and_wait, spawn
from ..inference_thread import Channel
from .jobs import Delivery, Ticket

__all__ = ["OpenRequests", "Watchdog"]

log = logging.getLogger("asgi_llm.engine")


class OpenRequests:
    """Requests submitted and not finished, each with the channel its events come through."""

    def __init__(self) -> None:
        self._open: dict[Ticket, Channel[Delivery]] = {}
        self.busy_since = 0.0  # when the requests open now began to be open, without a pause

    def __len__(self) -> int:
        return len(self._open)

    @contextlib.contextmanager
    def holding(self, ticket: Ticket, channel: Channel[Delivery]) -> Iterator[None]:
        if not self._open:
            self.busy_since = time.monotonic()
        self._open[ticket] = channel
        try:
            yield
        finally:
            ticket.cancel()
            self._open.pop(ticket, None)

    def fail_all(self, error: BaseException) -> None:
        for ticket, channel in list(self._open.items()):
            ticket.cancel()
            channel.fail(error)


class Watchdog:
    """Every second or so: has open work gone `limit` seconds without moving (`moved` gives when
    a job last moved, on the inference thread)? Then the model is `stalled` until `restart`
    (run on the inference thread) has brought it back."""

    def __init__(
        self,
        model: str,
        limit: float,
        requests: OpenRequests,
        moved: Callable[[], float],
        restart: Callable[[str], Awaitable[None]],
    ) -> None:
        self._model, self._limit, self._requests = model, limit, requests
        self._moved, self._restart = moved, restart
        self.stalled: str | None = None
        self.stalls = 0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = spawn(self._watch(), name="inference watchdog", log=log)

    async def stop(self) -> None:
        if self._task is not None:
            await cancel_and_wait(self._task)

    async def _watch(self) -> None:
        while True:
            await anyio.sleep(min(self._limit / 4, 1.0))
            if not len(self._requests) or self.stalled is not None:
                continue
            quiet = time.monotonic() - max(self._moved(), self._requests.busy_since)
            if quiet >= self._limit:
                await self._stall(f"its requests made no progress for {quiet:.0f}s")

    async def _stall(self, why: str) -> None:
        self.stalled = why
        self.stalls += 1
        log.error("model %s stalled: %s", self._model, why)
        self._requests.fail_all(
            ModelNotReady(f"The model '{self._model}' stalled ({why}) and is restarting; retry shortly.")
        )
        try:
            await self._restart(why)
        except Exception:
            log.exception("model %s could not restart", self._model)
            return  # it stays stalled: /health keeps saying so
        self.stalled = None
