"""A waiting request hears `Queued` at once, stops waiting once admitted, and gives up past its timeout."""

from __future__ import annotations

import asyncio

import pytest

from asgi_llm.core import Overloaded, Queued
from asgi_llm.engines.inference_thread import Channel
from asgi_llm.engines.llamacpp.jobs import Ticket
from asgi_llm.engines.llamacpp.waiting import waiting

pytestmark = pytest.mark.anyio


async def test_queued_at_once_then_done_when_admitted() -> None:
    channel: Channel[object] = Channel(asyncio.get_running_loop())
    ticket = Ticket(channel.send, choices=1)
    beats = waiting(channel, ticket, timeout=10, model="m")
    assert await beats.__anext__() == Queued(0.0)
    asyncio.get_running_loop().call_later(0.05, setattr, ticket, "admitted", True)
    started = asyncio.get_running_loop().time()
    assert [beat async for beat in beats] == []
    assert asyncio.get_running_loop().time() - started < 1


async def test_an_item_from_the_scheduler_ends_the_wait_at_once() -> None:
    channel: Channel[object] = Channel(asyncio.get_running_loop())
    ticket = Ticket(channel.send, choices=1)
    beats = waiting(channel, ticket, timeout=10, model="m")
    await beats.__anext__()
    channel.send(ValueError("refused"))  # e.g. an error for this request
    started = asyncio.get_running_loop().time()
    assert [beat async for beat in beats] == []
    assert asyncio.get_running_loop().time() - started < 0.2  # not a poll interval


async def test_past_the_timeout_it_is_overloaded() -> None:
    channel: Channel[object] = Channel(asyncio.get_running_loop())
    beats = waiting(channel, Ticket(channel.send, choices=1), timeout=0.1, model="m")
    await beats.__anext__()
    with pytest.raises(Overloaded, match="waited 0.1 s for the model 'm'") as caught:
        await beats.__anext__()
    assert caught.value.status == 503 and caught.value.retry_after >= 1
