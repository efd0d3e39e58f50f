"""The one inference thread, driven by plain callables and steppers instead of a model."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator

import anyio
import pytest

from asgi_llm.core import Finish, ModelNotReady, TextDelta, Usage
from asgi_llm.engines.inference_thread import IDLE_WAIT, Channel, InferenceThread
from asgi_llm.engines.llamacpp.jobs import END, Delivery, delivered

pytestmark = pytest.mark.anyio


@contextlib.asynccontextmanager
async def running() -> AsyncIterator[InferenceThread]:
    thread = InferenceThread(name="test-inference")
    thread.start()
    try:
        with anyio.fail_after(5):
            yield thread
    finally:
        await thread.stop()
    assert not thread.alive


async def test_every_call_runs_on_the_one_thread() -> None:
    async with running() as thread:
        first = await thread.call(threading.get_ident)
        second = await thread.call(threading.get_ident)
    assert first == second != threading.get_ident()


async def test_call_returns_value_and_raises() -> None:
    def boom() -> int:
        raise KeyError("nope")

    async with running() as thread:
        assert await thread.call(lambda: 6 * 7) == 42
        with pytest.raises(KeyError):
            await thread.call(boom)
        assert await thread.call(lambda: "still alive") == "still alive"


async def test_not_running_refuses_work() -> None:
    thread = InferenceThread()
    with pytest.raises(ModelNotReady):
        await thread.call(lambda: 1)


async def test_calls_queued_behind_a_stop_fail_with_model_not_ready() -> None:
    thread = InferenceThread()
    thread.start()
    release = threading.Event()
    blocker = asyncio.ensure_future(thread.call(release.wait))
    await asyncio.sleep(0.01)  # the thread is inside `release.wait` now
    stopping = asyncio.ensure_future(thread.stop())
    late = asyncio.ensure_future(thread.call(lambda: 1))
    await asyncio.sleep(0.01)
    release.set()
    with anyio.fail_after(5):
        assert await blocker is True
        await stopping
        with pytest.raises(ModelNotReady):
            await late


async def test_a_channel_hands_a_tickets_deliveries_across_and_raises_a_sent_exception() -> None:
    async with running() as thread:
        channel: Channel[Delivery] = Channel(asyncio.get_running_loop())
        events = [TextDelta("a"), TextDelta("b"), Finish("stop", Usage(1, 2))]
        await thread.call(lambda: [channel.send(e) for e in events] and channel.send(END))
        assert [event async for event in delivered(channel.receive)] == events
        await thread.call(lambda: channel.send(KeyError("gone")))
        with pytest.raises(KeyError):
            await anext(aiter(delivered(channel.receive)))


class CountingStepper:
    """Has `work` steps to do; records the thread each step ran on and what ended it."""

    def __init__(self, work: int) -> None:
        self.work = work
        self.threads: set[str] = set()
        self.abandoned: BaseException | None = None

    @property
    def active(self) -> bool:
        return self.work > 0

    def step(self) -> bool:
        self.threads.add(threading.current_thread().name)
        self.work -= 1
        return True

    def abandon(self, error: BaseException) -> None:
        self.abandoned = error


async def test_an_attached_stepper_is_stepped_on_the_thread_while_it_has_work() -> None:
    thread = InferenceThread(name="stepping")
    thread.start()
    try:
        stepper = CountingStepper(work=0)
        await thread.attach(stepper)
        assert not thread.busy
        await thread.call(lambda: setattr(stepper, "work", 25))  # work arrives, as a submit would bring it
        with anyio.fail_after(5):
            while stepper.work:
                await asyncio.sleep(0.001)
        assert stepper.threads == {"stepping"}
        await thread.detach(stepper)
        await thread.call(lambda: setattr(stepper, "work", 3))
        await thread.call(lambda: None)
        assert stepper.work == 3  # detached: no longer stepped
    finally:
        await thread.stop()


async def test_work_brought_to_an_idle_thread_is_stepped_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A submit wakes the thread, which steps the work right after the call: the idle wait is
    for steps that could do nothing, never for fresh work (it once added 50 ms to every first
    token of a request that found the model idle)."""
    monkeypatch.setattr("asgi_llm.engines.inference_thread.IDLE_WAIT", 30.0)
    thread = InferenceThread(name="waking")
    thread.start()
    try:
        stepper = CountingStepper(work=0)
        await thread.attach(stepper)
        for _ in range(3):  # each time from idle
            await thread.call(lambda: setattr(stepper, "work", 1))
            with anyio.fail_after(2):
                while stepper.work:
                    await asyncio.sleep(0.001)
            with anyio.fail_after(2):  # and it says it is idle again while it waits for the next call
                while thread.busy:
                    await asyncio.sleep(0.001)
    finally:
        await thread.stop()


class Stuck:
    """A stepper with work it can never do (every sequence held): each step says so."""

    def __init__(self) -> None:
        self.steps = 0

    @property
    def active(self) -> bool:
        return True

    def step(self) -> bool:
        self.steps += 1
        return False

    def abandon(self, error: BaseException) -> None:
        pass


async def test_work_that_cannot_move_does_not_spin_the_thread_and_calls_still_run() -> None:
    thread = InferenceThread()
    thread.start()
    stepper = Stuck()
    try:
        await thread.attach(stepper)
        await asyncio.sleep(0.5)
        with anyio.fail_after(1):
            assert await thread.call(lambda: "answered") == "answered"
        # a spinning thread steps hundreds of thousands of times in half a second
        assert 3 <= stepper.steps <= 0.5 / IDLE_WAIT + 5
    finally:
        await thread.stop()


async def test_stopping_the_thread_abandons_the_work_of_attached_steppers() -> None:
    thread = InferenceThread()
    thread.start()
    stepper = CountingStepper(work=0)
    await thread.attach(stepper)
    await thread.stop()
    assert isinstance(stepper.abandoned, ModelNotReady)


class Burst:
    """A stepper whose one step sends three items."""

    def __init__(self, channel: Channel[object]) -> None:
        self.channel, self.steps = channel, 0

    @property
    def active(self) -> bool:
        return self.steps == 0

    def step(self) -> bool:
        self.steps += 1
        for item in ("a", "b", "c"):
            self.channel.send(item)
        return True

    def abandon(self, error: BaseException) -> None:
        pass


async def test_items_sent_in_a_step_reach_the_loop_together_after_it_in_order() -> None:
    """The event loop is woken once per turn of the thread, not once per item, so its work
    (encoding, writing) does not take the GIL from a step half done."""
    loop = asyncio.get_running_loop()
    wakes = 0
    original = loop.call_soon_threadsafe

    def counting(callback, *args):  # type: ignore[no-untyped-def]
        nonlocal wakes
        if threading.current_thread().name == "test-inference":
            wakes += 1
        return original(callback, *args)

    loop.call_soon_threadsafe = counting  # type: ignore[method-assign]
    try:
        async with running() as thread:
            channel: Channel[object] = thread.channel(loop)
            before = wakes
            await thread.attach(Burst(channel))
            received = [await channel.receive() for _ in range(3)]
            await thread.detach(Burst(channel))
            assert received == ["a", "b", "c"]
            assert wakes - before == 3  # attach's result, the step's three items, detach's result
    finally:
        del loop.call_soon_threadsafe
