"""The one inference thread, driven by plain generators instead of a model."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator, Iterator

import anyio
import pytest

from asgi_llm.core import ModelNotReady
from asgi_llm.engines.inference_thread import InferenceThread

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


async def wait_for(event: threading.Event) -> None:
    while not event.is_set():
        await asyncio.sleep(0.001)


def spin_until(event: threading.Event, seconds: float = 2.0) -> Iterator[None]:
    """Yield points (not delivered) until `event` is set, so other streams get turns."""
    deadline = time.monotonic() + seconds
    while not event.is_set() and time.monotonic() < deadline:
        yield None


async def collect(stream: AsyncIterator[int]) -> list[int]:
    return [item async for item in stream]


async def test_calls_and_streams_run_on_one_thread() -> None:
    seen: list[int] = []

    def make() -> Iterator[int]:
        seen.append(threading.get_ident())
        for _ in range(3):
            yield threading.get_ident()

    async with running() as thread:
        first = await thread.call(threading.get_ident)
        streamed = await collect(thread.stream("a", make))
        second = await thread.call(threading.get_ident)
    assert first != threading.get_ident()
    assert seen == [first]
    assert streamed == [first] * 3
    assert second == first


async def test_call_returns_value_and_raises() -> None:
    def boom() -> int:
        raise KeyError("nope")

    async with running() as thread:
        assert await thread.call(lambda: 6 * 7) == 42
        with pytest.raises(KeyError):
            await thread.call(boom)
        assert await thread.call(lambda: "still alive") == "still alive"


async def test_stream_items_in_order_and_none_not_delivered() -> None:
    def make() -> Iterator[int | None]:
        for i in range(50):
            yield None
            yield i
        yield None

    async with running() as thread:
        assert await collect(thread.stream("a", make)) == list(range(50))  # type: ignore[arg-type]


async def test_aclose_closes_generator_on_thread_within_one_step() -> None:
    closed = threading.Event()
    left = threading.Event()
    steps_after_left = 0
    closed_on: list[int] = []

    def make() -> Iterator[int]:
        nonlocal steps_after_left
        try:
            i = 0
            while True:
                if left.is_set():
                    steps_after_left += 1
                yield i
                i += 1
                time.sleep(0.001)
        finally:
            closed_on.append(threading.get_ident())
            closed.set()

    async with running() as thread:
        ident = await thread.call(threading.get_ident)
        stream = thread.stream("a", make)
        received = [await stream.__anext__() for _ in range(3)]
        await stream.aclose()  # type: ignore[attr-defined]
        left.set()
        await wait_for(closed)
        assert await thread.call(lambda: 1) == 1
    assert received == [0, 1, 2]
    assert steps_after_left <= 1
    assert closed_on == [ident]


async def test_break_closes_generator_on_thread() -> None:
    closed = threading.Event()
    closed_on: list[int] = []

    def make() -> Iterator[int]:
        try:
            i = 0
            while True:
                yield i
                i += 1
                time.sleep(0.001)
        finally:
            closed_on.append(threading.get_ident())
            closed.set()

    async with running() as thread:
        ident = await thread.call(threading.get_ident)
        async for item in thread.stream("a", make):
            if item == 2:
                break
        await wait_for(closed)
        # the lane is free again: a new stream on it runs
        assert await collect(thread.stream("a", lambda: iter([7, 8]))) == [7, 8]
    assert closed_on == [ident]


async def test_same_lane_waits_for_the_first_stream() -> None:
    log: list[str] = []
    second_queued = threading.Event()

    def first() -> Iterator[int | None]:
        log.append("first:start")
        yield 0
        yield from spin_until(second_queued)
        for i in (1, 2):
            log.append(f"first:{i}")
            yield i
        log.append("first:end")

    def second() -> Iterator[int]:
        log.append("second:start")
        yield 10
        log.append("second:end")

    async with running() as thread:
        stream = thread.stream("model", first)
        assert await stream.__anext__() == 0
        task = asyncio.ensure_future(collect(thread.stream("model", second)))
        await asyncio.sleep(0.05)  # the second stream is queued behind the first by now
        second_queued.set()
        rest = [item async for item in stream]
        assert await task == [10]
    assert rest == [1, 2]
    assert log == ["first:start", "first:1", "first:2", "first:end", "second:start", "second:end"]


async def test_different_lanes_interleave() -> None:
    log: list[str] = []
    b_started = threading.Event()

    def a() -> Iterator[int | None]:
        yield from spin_until(b_started)
        log.append(f"a saw b: {b_started.is_set()}")
        yield 1

    def b() -> Iterator[int]:
        b_started.set()
        log.append("b started")
        yield 2

    async with running() as thread:
        results = await asyncio.gather(collect(thread.stream("x", a)), collect(thread.stream("y", b)))  # type: ignore[arg-type]
    assert results == [[1], [2]]
    assert log == ["b started", "a saw b: True"]


async def test_generator_exception_reaches_the_consumer() -> None:
    def make() -> Iterator[int]:
        yield 1
        raise ValueError("boom")

    async with running() as thread:
        received: list[int] = []
        with pytest.raises(ValueError, match="boom"):
            async for item in thread.stream("a", make):
                received.append(item)
        assert received == [1]
        assert await collect(thread.stream("a", lambda: iter([3]))) == [3]  # the lane was freed


async def test_exception_in_make_reaches_the_consumer() -> None:
    def make() -> Iterator[int]:
        raise RuntimeError("cannot start")

    async with running() as thread:
        with pytest.raises(RuntimeError, match="cannot start"):
            await collect(thread.stream("a", make))


async def test_stop_ends_running_streams_with_model_not_ready() -> None:
    closed = threading.Event()

    def make() -> Iterator[int]:
        try:
            while True:
                yield 1
                time.sleep(0.001)
        finally:
            closed.set()

    thread = InferenceThread()
    thread.start()
    with anyio.fail_after(5):
        stream = thread.stream("a", make)
        assert await stream.__anext__() == 1
        await thread.stop()
        assert closed.is_set()
        with pytest.raises(ModelNotReady):
            while True:
                await stream.__anext__()
    assert not thread.alive


async def test_not_running_refuses_work() -> None:
    thread = InferenceThread()
    with pytest.raises(ModelNotReady):
        await thread.call(lambda: 1)
    with pytest.raises(ModelNotReady):
        await collect(thread.stream("a", lambda: iter([1])))


class CountingStepper:
    """Has `work` steps to do; records the thread each step ran on and what ended it."""

    def __init__(self, work: int) -> None:
        self.work = work
        self.threads: set[str] = set()
        self.abandoned: BaseException | None = None

    @property
    def active(self) -> bool:
        return self.work > 0

    def step(self) -> None:
        self.threads.add(threading.current_thread().name)
        self.work -= 1

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


async def test_stopping_the_thread_abandons_the_work_of_attached_steppers() -> None:
    thread = InferenceThread()
    thread.start()
    stepper = CountingStepper(work=0)
    await thread.attach(stepper)
    await thread.stop()
    assert isinstance(stepper.abandoned, ModelNotReady)
