"""A request waiting for a free sequence is never silent, and never waits forever."""

from __future__ import annotations

from collections.abc import AsyncGenerator

import anyio

from ...core.errors import Overloaded
from ...core.events import Queued
from ..inference_thread import Channel
from .jobs import Delivery, Ticket

__all__ = ["waiting"]

BEAT = 5.0  # seconds between the `Queued` events of a waiting request
POLL = 0.25  # seconds between looks at whether it got its sequence


async def waiting(
    channel: Channel[Delivery], ticket: Ticket, *, timeout: float, model: str
) -> AsyncGenerator[Queued, None]:
    """While the request waits for a free sequence: `Queued` at once and every `BEAT` seconds,
    so a stream can send headers and keep-alives. Past `timeout`, a 503 (the caller marks the
    ticket cancelled, which drops its jobs from the queue before they cost anything). Ends once
    the scheduler admitted it or sent it anything."""
    start = beat = anyio.current_time()
    yield Queued(0.0)
    while not ticket.admitted and not channel.pending:
        now = anyio.current_time()
        if now - start >= timeout:
            raise Overloaded(f"This request waited {timeout:g} s for the model '{model}' to be free; retry shortly.")
        if now - beat >= BEAT:
            beat = now
            yield Queued(now - start)
        with anyio.move_on_after(min(POLL, start + timeout - now)):
            await channel.ready()
