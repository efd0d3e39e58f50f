"""The one thread that makes every model call.

llama.cpp decodes at less than half speed as soon as its calls come from more than
one thread (measured; see ARCHITECTURE.md), so nothing here uses a thread pool. Calls
arrive through a queue; steppers (a model's batch scheduler) get one `step()` per
turn while they have work, so a short call such as tokenizing never waits for a
long generation to finish.
"""

from __future__ import annotations

# asyncio for the bridge from this thread to the event loop: `call_soon_threadsafe` into the
# receiving loop, its futures, `wrap_future` of a call's concurrent.futures.Future, and
# `to_thread` for the join at the end (in the loop's own executor, which the loop can see)
import asyncio
import concurrent.futures
import contextlib
import logging
import queue
import threading
from collections import deque
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

from ..core.errors import ModelNotReady

__all__ = ["Channel", "InferenceThread", "Stepper"]

T = TypeVar("T")
log = logging.getLogger("asgi_llm.inference")

_STOP = object()
IDLE_WAIT = 0.05
"""Seconds the thread waits for a call when its steppers have work none of them can do now
(every sequence held, nothing to decode): a client leaving is noticed within this, no core spins."""


class _Outbox:
    """Items sent on its inference thread, held until that thread's turn is done (`flush`): the
    event loop is then woken once per turn, and does its share (encoding, writing) while the
    next decode runs without the GIL, rather than taking the GIL from the step in between."""

    def __init__(self) -> None:
        self.owner: int | None = None  # the inference thread's ident, while it runs
        self._items: list[tuple[Channel[Any], object]] = []

    def holds(self, channel: Channel[Any], item: object) -> bool:
        """Keep `item` for `channel` until the turn ends; False off the owning thread."""
        if threading.get_ident() != self.owner:
            return False
        self._items.append((channel, item))
        return True

    def flush(self) -> None:
        if not self._items:
            return
        items, self._items = self._items, []
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[Channel[Any], object]]] = {}
        for channel, item in items:
            by_loop.setdefault(channel._loop, []).append((channel, item))
        for loop, batch in by_loop.items():
            with contextlib.suppress(RuntimeError):  # that loop is gone: nobody listens
                loop.call_soon_threadsafe(_deliver, batch)


def _deliver(items: list[tuple[Channel[Any], object]]) -> None:
    for channel, item in items:
        channel._push(item)


class Channel(Generic[T]):
    """Hands items from the inference thread to one coroutine without blocking the thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop, outbox: _Outbox | None = None) -> None:
        self._loop = loop
        self._outbox = outbox
        self._items: deque[T] = deque()
        self._waiter: asyncio.Future[None] | None = None

    def send(self, item: T) -> bool:
        """Called on the inference thread (from `InferenceThread.channel`'s: delivered at the end
        of its turn); False when the receiving loop is gone."""
        if self._loop.is_closed():
            return False
        if self._outbox is not None and self._outbox.holds(self, item):
            return True
        try:
            self._loop.call_soon_threadsafe(self._push, item)
        except RuntimeError:
            return False
        return True

    def fail(self, error: T) -> None:
        """End the receiver with `error` now; called on the receiving loop (the watchdog), so it
        needs nothing of the inference thread."""
        self._push(error)

    def _push(self, item: T) -> None:
        self._items.append(item)
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    @property
    def pending(self) -> bool:
        """Whether an item is there to receive."""
        return bool(self._items)

    async def ready(self) -> None:
        """Wait until an item is there to receive (safe to cancel: nothing is taken)."""
        while not self._items:
            self._waiter = self._loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None

    async def receive(self) -> T:
        await self.ready()
        return self._items.popleft()


class Stepper(Protocol):
    """Work advanced a step at a time on the inference thread, e.g. one batched decode."""

    @property
    def active(self) -> bool:
        """Whether a step would do anything (read on the inference thread)."""
        ...

    def step(self) -> bool:
        """One short unit of work; False when it could do nothing (then the thread waits for a
        call or a moment before trying again, rather than spin). Must not raise: errors go to
        whoever the work is for."""
        ...

    def abandon(self, error: BaseException) -> None:
        """End all work with `error`: the thread is stopping."""
        ...


class _CallJob:
    def __init__(self, fn: Callable[[], Any], future: concurrent.futures.Future[Any]) -> None:
        self.fn = fn
        self.future = future


class InferenceThread:
    """Runs calls, and steps attached steppers, on one dedicated thread."""

    def __init__(self, name: str = "asgi-llm-inference") -> None:
        self._name = name
        self._inbox: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._steppers: list[Stepper] = []  # touched on the inference thread only
        self._stepping = False  # whether a stepper had work at the last turn (a snapshot for `busy`)
        self._outbox = _Outbox()

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def busy(self) -> bool:
        """Whether a stepper had work at the last turn (read from any thread; a snapshot)."""
        return self._stepping

    def start(self) -> None:
        if self.alive:
            return
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()

    async def stop(self) -> None:
        """Cancel what is running, let the thread exit, and wait for it: joined in the loop's own
        executor, not polled on a timer, so the wait is the thread's and nothing else's (a loop
        whose clock runs ahead, as a test's may, does not see it as seconds passing)."""
        thread = self._thread
        if thread is None:
            return
        self._inbox.put(_STOP)
        await asyncio.to_thread(thread.join)
        self._thread = None

    async def call(self, fn: Callable[[], T]) -> T:
        """Run `fn` on the inference thread and return its result."""
        self._require_running()
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._inbox.put(_CallJob(fn, future))
        return await asyncio.wrap_future(future)

    def channel(self, loop: asyncio.AbstractEventLoop) -> Channel[Any]:
        """A channel to a coroutine on `loop` whose items sent on this thread go out together,
        once per turn."""
        return Channel(loop, self._outbox)

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
        self._outbox.owner = threading.get_ident()
        stopping = False
        progressed = True
        while not stopping:
            busy = any(stepper.active for stepper in self._steppers)
            self._stepping = busy  # read as `busy` while this waits for calls
            stopping = self._admit(wait=None if not busy else 0.0 if progressed else IDLE_WAIT)
            # Read after the calls: a call that queued work (a submit) is stepped at once,
            # not after an idle wait.
            active = [stepper for stepper in self._steppers if stepper.active]
            self._stepping = bool(active)
            progressed = False
            for stepper in active:
                try:
                    progressed = stepper.step() or progressed
                except Exception:  # a stepper reports its own errors; the thread must go on
                    log.exception("a scheduler step failed")
            self._outbox.flush()
        self._stepping = False
        self._cancel_all()
        self._outbox.flush()
        self._outbox.owner = None

    def _admit(self, *, wait: float | None) -> bool:
        """Take everything queued, waiting up to `wait` seconds (None: until something comes) for
        the first; run calls at once. True when asked to stop."""
        try:
            item = self._inbox.get(timeout=wait) if wait != 0.0 else self._inbox.get_nowait()
        except queue.Empty:
            return False
        while True:
            if item is _STOP:
                return True
            if isinstance(item, _CallJob):
                self._run_call(item)
                self._outbox.flush()
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
        except BaseException as exc:  # noqa: BLE001 (delivered to the awaiting coroutine)
            job.future.set_exception(exc)

    def _cancel_all(self) -> None:
        gone = ModelNotReady("The model server is shutting down.")
        for stepper in self._steppers:
            stepper.abandon(gone)
        while True:
            try:
                item = self._inbox.get_nowait()
            except queue.Empty:
                return
            if isinstance(item, _CallJob):
                item.future.set_exception(gone)
