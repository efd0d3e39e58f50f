"""Replicas of one upstream model: least-outstanding-requests choice, health checks, backoff.

A replica that fails a request or a health check is taken out of rotation and checked again
after a backoff that doubles with each failure in a row (up to `max_backoff`); the first
check that passes puts it back. Healthy replicas are checked every `interval` seconds. With
every replica out, requests still go to the one due back soonest, so a stale mark never
refuses work the upstream could do. No I/O here: the probe is handed in.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import anyio

__all__ = ["NoReplica", "Replica", "ReplicaSet"]

log = logging.getLogger("asgi_llm.upstream")

Probe = Callable[[str], Awaitable[bool]]


class NoReplica(Exception):
    """Every replica has been tried for this request."""


@dataclass
class Replica:
    number: int
    url: str  # never shown: it may carry credentials
    healthy: bool = True
    outstanding: int = 0
    failures: int = 0
    due: float = 0.0  # when the next health check is due
    requests: int = 0  # requests sent to it, for health output

    def describe(self) -> dict[str, Any]:
        return {
            "replica": self.number,
            "healthy": self.healthy,
            "outstanding": self.outstanding,
            "requests": self.requests,
        }


class ReplicaSet:
    def __init__(
        self,
        urls: Sequence[str],
        *,
        interval: float = 10.0,
        backoff: float = 0.5,
        max_backoff: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not urls:
            raise ValueError("an upstream needs at least one base URL")
        self.replicas = [Replica(n, url) for n, url in enumerate(urls)]
        self._interval, self._backoff, self._max_backoff = interval, backoff, max_backoff
        self._clock = clock

    def choose(self, exclude: Collection[Replica] = ()) -> Replica:
        """The healthy replica with the fewest requests in flight (ties: the one used least),
        or, with none healthy, the one due back soonest; `exclude` are those tried already."""
        left = [r for r in self.replicas if r not in exclude]
        if not left:
            raise NoReplica()
        healthy = [r for r in left if r.healthy]
        if healthy:
            return min(healthy, key=lambda r: (r.outstanding, r.requests, r.number))
        return min(left, key=lambda r: (r.due, r.number))

    def attempts(self) -> Iterator[Replica]:
        """Each replica in the order `choose` picks them, each once: one request's tries."""
        tried: list[Replica] = []
        while True:
            try:
                replica = self.choose(tried)
            except NoReplica:
                return
            tried.append(replica)
            yield replica

    def acquire(self, replica: Replica) -> None:
        replica.outstanding += 1
        replica.requests += 1

    def release(self, replica: Replica) -> None:
        replica.outstanding -= 1

    def failed(self, replica: Replica) -> None:
        """Out of rotation until a health check passes, after a backoff doubling per failure."""
        if replica.healthy:
            log.warning("upstream replica %d failed; taken out of rotation", replica.number)
        replica.healthy = False
        replica.failures += 1
        delay = min(self._backoff * 2 ** (replica.failures - 1), self._max_backoff)
        replica.due = self._clock() + delay

    def passed(self, replica: Replica) -> None:
        if not replica.healthy:
            log.warning("upstream replica %d is healthy again", replica.number)
        replica.healthy, replica.failures = True, 0
        replica.due = self._clock() + self._interval

    def due(self) -> list[Replica]:
        now = self._clock()
        return [r for r in self.replicas if r.due <= now]

    def next_due(self) -> float:
        """Seconds until the next health check is due."""
        return max(0.0, min(r.due for r in self.replicas) - self._clock())

    async def check(self, probe: Probe, replicas: Sequence[Replica] | None = None) -> None:
        """Probe these replicas (default: those due) at once and mark each by its answer."""
        batch = self.due() if replicas is None else replicas
        results = [False] * len(batch)

        async def answer(index: int, url: str) -> None:
            try:
                results[index] = await probe(url) is True
            except Exception:  # noqa: BLE001 - a probe that raises fails its replica, as one that answers False
                results[index] = False

        async with anyio.create_task_group() as group:
            for index, replica in enumerate(batch):
                group.start_soon(answer, index, replica.url)
        for replica, ok in zip(batch, results):
            if ok:
                self.passed(replica)
            else:
                self.failed(replica)

    async def watch(self, probe: Probe) -> None:
        """Health-check forever, each replica when it is due (run as a task; cancel to stop)."""
        while True:
            await anyio.sleep(self.next_due())
            await self.check(probe)

    def describe(self) -> list[dict[str, Any]]:
        return [r.describe() for r in self.replicas]
