"""The one thread that makes every model call.

llama.cpp decodes at less than half speed as soon as its calls come from more than
one thread (measured; see DESIGN.md), so nothing here uses a thread pool. Work
arrives through a queue; streams advance one item (one token) per turn, so a
short call such as tokenizing never waits for a long generation to finish.
Steppers (a model's batch scheduler) get one `step()` per turn while they have work.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import queue
import threading
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Generator, Hashable
from typing import Any, Generic, Protocol, TypeVar

from ..core.errors import ModelNotReady

__all__ = ["Channel", "InferenceThread", "Stepper"]

T = TypeVar("T")
log = logging.getLogger("asgi_llm.inference")

_END = object()
_STOP = object()


class Channel(Generic[T]):
    """Hands items from the inference thread to one coroutine without blocking the thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._items: deque[object] = deque()
        self._waiter: asyncio.Future[None] | None = None

    def send(self, item: object) -> bool:
        """Called on the inference thread; False when the receiving loop is gone."""
        try:
            self._loop.call_soon_threadsafe(self._push, item)
        except RuntimeError:
            return False
        return True

    def _push(self, item: object) -> None:
        self._items.append(item)
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def receive(self) -> object:
        while not self._items:
            self._waiter = self._loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        return self._items.popleft()

    async def until(self, end: object) -> AsyncIterator[T]:
        """Received items up to `end`; an exception sent as an item is raised here."""
        while True:
            item = await self.receive()
            if item is end:
                return
            if isinstance(item, BaseException):
                raise item
            yield item  # type: ignore[misc]


class Stepper(Protocol):
    """Work advanced a step at a time on the inference thread, e.g. one batched decode."""

    @property
    def active(self) -> bool:
        """Whether a step would do anything (read on the inference thread)."""
        ...

    def step(self) -> None:
        """One short unit of work; must not raise (errors go to whoever the work is for)."""
        ...

    def abandon(self, error: BaseException) -> None:
        """End all work with `error`: the thread is stopping."""
        ...


class _CallJob:
    def __init__(self, fn: Callable[[], Any], future: concurrent.futures.Future[Any]) -> None:
        self.fn = fn
        self.future = future


class _StreamJob:
    def __init__(self, lane: Hashable, make: Callable[[], Generator[Any, None, Any]], channel: Channel[Any]) -> None:
        self.lane = lane
        self.make = make
        self.channel = channel
        self.iterator: Generator[Any, None, Any] | None = None
        self.cancelled = False  # set by the event loop, read here every step


class InferenceThread:
    """Runs calls and step-wise streams on one dedicated thread.

    Streams on the same `lane` (one model's context) run one after another in FIFO
    order; streams on different lanes interleave token by token.
    """

    def __init__(self, name: str = "asgi-llm-inference") -> None:
        self._name = name
        self._inbox: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._running: dict[Hashable, _StreamJob] = {}
        self._waiting: dict[Hashable, deque[_StreamJob]] = {}
        self._steppers: list[Stepper] = []  # touched on the inference thread only
        self._stepping = False  # whether a stepper had work at the last turn (a snapshot for `busy`)

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def busy(self) -> bool:
        """Whether a stream is running or waiting (read from any thread; a snapshot)."""
        return bool(self._running or self._waiting or self._stepping)

    def start(self) -> None:
        if self.alive:
            return
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()

    async def stop(self) -> None:
        """Cancel what is running, let the thread exit, and wait for it."""
        thread = self._thread
        if thread is None:
            return
        self._inbox.put(_STOP)
        while thread.is_alive():
            await asyncio.sleep(0.005)
        self._thread = None

    async def call(self, fn: Callable[[], T]) -> T:
        """Run `fn` on the inference thread and return its result."""
        self._require_running()
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._inbox.put(_CallJob(fn, future))
        return await asyncio.wrap_future(future)

    async def stream(
        self, lane: Hashable, make: Callable[[], Generator[T | None, None, Any]]
    ) -> AsyncGenerator[T, None]:
        """Iterate `make()` on the inference thread, one item per turn.

        `None` items are yield points (e.g. between prompt chunks) and are not delivered.
        `make` is called on the thread; leaving the loop early (break, cancellation,
        client gone) makes the thread close the iterator before its next step.
        """
        self._require_running()
        channel: Channel[T] = Channel(asyncio.get_running_loop())
        job = _StreamJob(lane, make, channel)
        self._inbox.put(job)
        try:
            async for item in channel.until(_END):
                yield item
        finally:
            job.cancelled = True

    async def attach(self, stepper: Stepper) -> None:
        """Step `stepper` every turn it is active, until `detach`."""
        await self.call(lambda: self._steppers.append(stepper))

    async def detach(self, stepper: Stepper) -> None:
        await self.call(lambda: self._steppers.remove(stepper) if stepper in self._steppers else None)

    def _require_running(self) -> None:
        if not self.alive:
            raise ModelNotReady("The model server is not running.")

    # -- on the inference thread -------------------------------------------------

    def _run(self) -> None:
        stopping = False
        while not stopping:
            active = [stepper for stepper in self._steppers if stepper.active]
            self._stepping = bool(active)
            stopping = self._admit(block=not self._running and not active)
            for job in list(self._running.values()):
                self._step(job)
            for stepper in active:
                try:
                    stepper.step()
                except Exception:  # a stepper reports its own errors; the thread must go on
                    log.exception("a scheduler step failed")
        self._stepping = False
        self._cancel_all()

    def _admit(self, *, block: bool) -> bool:
        """Take everything queued; run calls at once. True when asked to stop."""
        try:
            item = self._inbox.get() if block else self._inbox.get_nowait()
        except queue.Empty:
            return False
        while True:
            if item is _STOP:
                return True
            if isinstance(item, _CallJob):
                self._run_call(item)
            elif isinstance(item, _StreamJob):
                if item.lane in self._running:
                    self._waiting.setdefault(item.lane, deque()).append(item)
                else:
                    self._running[item.lane] = item
            try:
                item = self._inbox.get_nowait()
            except queue.Empty:
                return False

    @staticmethod
    def _run_call(job: _CallJob) -> None:
        if not job.future.set_running_or_notify_cancel():
            return
        try:
            job.future.set_result(job.fn())
        except BaseException as exc:  # delivered to the awaiting coroutine
            job.future.set_exception(exc)

    def _step(self, job: _StreamJob) -> None:
        if job.cancelled:
            self._finish(job, None)
            return
        try:
            if job.iterator is None:
                job.iterator = job.make()
            item = next(job.iterator)
        except StopIteration:
            self._finish(job, _END)
        except Exception as exc:
            self._finish(job, exc)
        else:
            if item is not None and not job.channel.send(item):
                job.cancelled = True

    def _finish(self, job: _StreamJob, last: object) -> None:
        if job.iterator is not None:
            try:
                job.iterator.close()
            except Exception:
                log.exception("closing a generation failed")
        if last is not None:
            job.channel.send(last)
        del self._running[job.lane]
        waiting = self._waiting.get(job.lane)
        while waiting:
            nxt = waiting.popleft()
            if not nxt.cancelled:
                self._running[job.lane] = nxt
                break
        if not waiting:
            self._waiting.pop(job.lane, None)

    def _cancel_all(self) -> None:
        gone = ModelNotReady("The model server is shutting down.")
        for stepper in self._steppers:
            stepper.abandon(gone)
        jobs = list(self._running.values()) + [j for q in self._waiting.values() for j in q]
        for job in jobs:
            if job.iterator is not None:
                job.iterator.close()
            job.channel.send(gone)
        self._running.clear()
        self._waiting.clear()
        while True:
            try:
                item = self._inbox.get_nowait()
            except queue.Empty:
                return
            if isinstance(item, _CallJob):
                item.future.set_exception(gone)
            elif isinstance(item, _StreamJob):
                item.channel.send(gone)
