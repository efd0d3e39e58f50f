"""The pool under random sequences of operator and client calls, over the fake engine
(hypothesis' stateful testing): loads, unloads, pins, requests held across steps, idle expiry,
reloads and eviction under `max_loaded_models` and `memory_budget`. After every step: every call
answered within a bound, no model loaded more often than it was asked for, an explicit load left
its model loaded, and the residency limits held.

Each machine runs its pool on a private event loop whose clock jumps to the next timer whenever
nothing else can run, so loads, keep-alives and load waits take virtual seconds: the runs are
fast and deterministic."""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import selectors
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar, TypeVarTuple, Unpack

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from asgi_llm import ModelConfig, ModelPool, Settings
from asgi_llm.core import InsufficientMemory, Overloaded
from asgi_llm.engines.fake import FakeEngine
from asgi_llm.engines.inference_thread import InferenceThread

T = TypeVar("T")
Ts = TypeVarTuple("Ts")
MIB = 1024 * 1024
FLOOR = 16 * MIB  # a fake model's estimate without a prompt cache: the compute floor alone
PROMPT_CACHE_MIB = {"a": 0, "b": 0, "c": 8, "d": 24}  # models of different sizes
NAMES = tuple(PROMPT_CACHE_MIB)
LOAD_SECONDS = 1.0  # how long a fake model takes to load (virtual)
KEEP = 5.0  # a configured or requested idle time (virtual)
WAIT = 3.0  # load_wait_seconds
MAX_OPEN = 4  # requests held open across steps
BOUND = (MAX_OPEN + 2) * (WAIT + LOAD_SECONDS)  # a call queues behind at most every other load
LONG = BOUND + KEEP + 1  # an idle time after which every armed expiry has fired
REFUSALS = (InsufficientMemory, Overloaded)  # what a call may answer instead of success

keep_alives = st.sampled_from([None, 0.0, -1.0, KEEP])


class _Jumping(selectors.DefaultSelector):
    """Never sleeps for a timer: jumps the clock to it, unless a thread is working or its
    answer is on the way."""

    def __init__(self) -> None:
        super().__init__()
        self.offset = 0.0
        self.threads = 0  # calls in threads whose answer the loop has not yet taken

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None or timeout <= 0 or self.threads:
            return super().select(None if timeout is None else min(timeout, 0.05))
        ready: list[tuple[selectors.SelectorKey, int]] = super().select(0)
        if not ready:
            self.offset += timeout
        return ready


class _VirtualLoop(asyncio.SelectorEventLoop):
    """An event loop on virtual time: a timer fires as soon as nothing else can run."""

    def __init__(self) -> None:
        self._jumping = _Jumping()
        super().__init__(self._jumping)

    def time(self) -> float:
        return time.monotonic() + self._jumping.offset

    def run_in_executor(
        self, executor: concurrent.futures.Executor | None, func: Callable[[Unpack[Ts]], T], *args: *Ts
    ) -> asyncio.Future[T]:
        future = super().run_in_executor(executor, func, *args)
        self._jumping.threads += 1  # counted down with the answer's own callbacks, so no gap between them
        future.add_done_callback(self._answered)
        return future

    def _answered(self, _: object) -> None:
        self._jumping.threads -= 1


class _SlowFake(FakeEngine):
    async def load(self) -> None:
        await asyncio.sleep(LOAD_SECONDS)


@dataclass
class _Held:
    """A request held open across steps."""

    name: str
    task: asyncio.Task[None]
    holding: asyncio.Event
    release: asyncio.Event


async def _settle() -> None:
    """Let every callback due now run (timers of 0 s included), without letting time pass."""
    for _ in range(8):
        await asyncio.sleep(0)


class PoolMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = _VirtualLoop()
        self.loads: collections.Counter[str] = collections.Counter()  # engines made, by model
        self.asked: collections.Counter[str] = collections.Counter()  # loads and requests, by model
        self.held: list[_Held] = []
        self.pool: ModelPool | None = None
        self.max_loaded: int | None = None
        self.budget: int | None = None

    def _factory(self, config: ModelConfig, thread: object) -> FakeEngine:
        self.loads[config.id] += 1
        return _SlowFake(config)

    def _settings(self, keep: dict[str, float | None], pinned: frozenset[str]) -> Settings:
        models = tuple(
            ModelConfig(
                id=name,
                path=f"{name}.gguf",
                load="lazy",
                keep_alive=keep[name],
                pin=name in pinned,
                prompt_cache_mib=PROMPT_CACHE_MIB[name],
            )
            for name in NAMES
        )
        return Settings(
            models=models, max_loaded_models=self.max_loaded, memory_budget=self.budget, load_wait_seconds=WAIT
        )

    def run(self, what: str, call: Coroutine[Any, Any, T], bound: float = BOUND) -> T:
        try:
            return self.loop.run_until_complete(asyncio.wait_for(call, bound))
        except TimeoutError:
            raise AssertionError(f"{what} did not answer within {bound:g}s") from None

    def state(self, name: str) -> str:
        assert self.pool is not None
        return next(card.state for card in self.pool.catalog() if card.id == name)

    def holders(self, name: str | None = None) -> list[_Held]:
        """Requests still open (for `name`), holding their model or still waiting for it."""
        return [h for h in self.held if not h.task.done() and name in (None, h.name)]

    @property
    def quiet(self) -> bool:
        """Whether no open request is still waiting for its model (whose load could evict another)."""
        return all(h.holding.is_set() for h in self.holders())

    @initialize(
        max_loaded=st.sampled_from([None, 1, 2, 3]),
        budget=st.sampled_from([None, FLOOR - MIB, FLOOR + MIB, 2 * FLOOR + 9 * MIB, 3 * FLOOR + 33 * MIB]),
        keep=st.fixed_dictionaries({name: st.sampled_from([None, KEEP]) for name in NAMES}),
        pinned=st.frozensets(st.sampled_from(NAMES), max_size=2),
    )
    def start(
        self, max_loaded: int | None, budget: int | None, keep: dict[str, float | None], pinned: frozenset[str]
    ) -> None:
        self.max_loaded, self.budget = max_loaded, budget
        self.pool = ModelPool(self._settings(keep, pinned), engine_factory=self._factory)
        self.run("start", self.pool.start())

    @rule(name=st.sampled_from(NAMES))
    def load(self, name: str) -> None:
        self.asked[name] += 1
        self.run(f"load {name}", self._load(name))

    async def _load(self, name: str) -> None:
        assert self.pool is not None
        try:
            await self.pool.load(name)
        except REFUSALS:
            return
        assert self.state(name) == "ready"
        await _settle()
        if self.quiet:  # nothing may unload it now: an earlier unload's keep_alive 0 no longer holds
            assert self.state(name) == "ready"

    @rule(name=st.sampled_from(NAMES))
    def unload(self, name: str) -> None:
        self.run(f"unload {name}", self._unload(name))

    async def _unload(self, name: str) -> None:
        assert self.pool is not None
        await self.pool.unload(name)
        await _settle()
        if not self.holders(name):
            assert self.state(name) == "unloaded"

    @rule(name=st.sampled_from(NAMES), pinned=st.booleans())
    def pin(self, name: str, pinned: bool) -> None:
        self.run(f"pin {name}", self._pin(name, pinned))

    async def _pin(self, name: str, pinned: bool) -> None:
        assert self.pool is not None
        self.pool.pin(name, pinned)
        await _settle()

    @rule(name=st.sampled_from(NAMES), keep_alive=keep_alives)
    def request(self, name: str, keep_alive: float | None) -> None:
        self.asked[name] += 1
        self.run(f"a request for {name}", self._request(name, keep_alive))

    async def _request(self, name: str, keep_alive: float | None) -> None:
        assert self.pool is not None
        try:
            async with self.pool.use(name, keep_alive=keep_alive) as (engine, model_id):
                assert model_id == name and not engine.closed  # type: ignore[attr-defined]
        except REFUSALS:
            pass
        await _settle()

    @precondition(lambda self: len(self.holders()) < MAX_OPEN)
    @rule(name=st.sampled_from(NAMES), keep_alive=keep_alives)
    def open_request(self, name: str, keep_alive: float | None) -> None:
        self.asked[name] += 1
        holding, release = asyncio.Event(), asyncio.Event()
        task = self.loop.create_task(self._hold(name, keep_alive, holding, release))
        self.held.append(_Held(name, task, holding, release))
        self.run(f"opening a request for {name}", _settle())

    async def _hold(self, name: str, keep_alive: float | None, holding: asyncio.Event, release: asyncio.Event) -> None:
        assert self.pool is not None
        try:
            async with self.pool.use(name, keep_alive=keep_alive) as (engine, model_id):
                holding.set()
                await release.wait()
                assert model_id == name and not engine.closed  # type: ignore[attr-defined]  # never cut
        except REFUSALS:
            pass

    @precondition(lambda self: bool(self.held))
    @rule(data=st.data())
    def close_request(self, data: st.DataObject) -> None:
        held = self.held.pop(data.draw(st.integers(0, len(self.held) - 1)))
        held.release.set()
        self.run(f"the request for {held.name}", self._closed(held))

    @staticmethod
    async def _closed(held: _Held) -> None:
        await held.task
        await _settle()

    @rule(seconds=st.sampled_from([0.5, KEEP + 1, LONG]))
    def idle(self, seconds: float) -> None:
        self.run(f"{seconds:g}s idle", self._idle(seconds), seconds + BOUND)

    async def _idle(self, seconds: float) -> None:
        assert self.pool is not None
        await asyncio.sleep(seconds)
        await _settle()
        if seconds < LONG:
            return
        busy = {h.name for h in self.holders()}
        for card in self.pool.catalog():  # every idle unload that was due has happened
            assert card.id in busy or card.state != "ready" or card.expires_at is None, card

    @rule(
        keep=st.fixed_dictionaries({name: st.sampled_from([None, KEEP]) for name in NAMES}),
        pinned=st.frozensets(st.sampled_from(NAMES), max_size=2),
    )
    def reload(self, keep: dict[str, float | None], pinned: frozenset[str]) -> None:
        """New keep-alives and pins: a changed model unloads (now, or after its requests). Its
        size stays: a model whose new estimate is larger is counted at that size while its
        requests still run on the old engine, so the budget check would flag an accounting
        transient rather than a load."""
        assert self.pool is not None
        self.run("reload", self.pool.reload(self._settings(keep, pinned)))
        self.run("settling", _settle())

    @invariant()
    def within_the_limits(self) -> None:
        if self.pool is None:
            return
        ready = [card for card in self.pool.catalog() if card.state == "ready"]
        _, health = self.pool.health()
        residency = health.get("residency", {})
        if self.max_loaded is not None:
            assert len(ready) <= self.max_loaded and residency["loaded_models"] <= self.max_loaded
        if self.budget is not None:
            assert sum(card.memory for card in ready) <= self.budget and residency["estimated_bytes"] <= self.budget

    @invariant()
    def loaded_at_most_once_per_request(self) -> None:
        for name, loads in self.loads.items():
            assert loads <= self.asked[name], f"{name} loaded {loads} times for {self.asked[name]} requests"

    def teardown(self) -> None:
        try:
            for held in self.held:
                held.release.set()
            if self.pool is not None:
                self.run("the open requests", self._finish())
                self.run("stop", self.pool.stop())
                assert all(card.state != "ready" for card in self.pool.catalog())
        finally:
            self._close_loop()

    async def _finish(self) -> None:
        for held in self.held:
            await held.task
        await _settle()

    def _close_loop(self) -> None:
        self.loop.run_until_complete(_cancel_all())
        self.loop.run_until_complete(self.loop.shutdown_default_executor())
        self.loop.close()


async def _cancel_all() -> None:
    """End whatever a failed run left behind (a failure's task, an idle unload in flight)."""
    tasks = asyncio.all_tasks() - {asyncio.current_task()}
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


PoolMachine.TestCase.settings = settings(
    max_examples=50, stateful_step_count=30, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
test_pool_states = PoolMachine.TestCase


@pytest.mark.anyio  # on uvloop and asyncio, as every async test (tests/conftest.py)
async def test_a_load_after_an_unload_answers_and_stays_loaded() -> None:
    """The unload's keep_alive 0 (the operator's, or an Ollama request's) outlived the unload, and
    the explicit load did not hold the model: on uvloop its idle unload fired before the load's
    caller saw it ready, and it loaded and unloaded forever."""
    loads: list[FakeEngine] = []

    def factory(config: ModelConfig, thread: object) -> FakeEngine:
        loads.append(FakeEngine(config))
        return loads[-1]

    pool = ModelPool(Settings(models=(ModelConfig(id="m", path="m.gguf", load="lazy"),)), engine_factory=factory)
    await pool.start()
    try:
        for unload in ("operator", "keep_alive 0"):
            await asyncio.wait_for(pool.load("m"), 1)
            if unload == "operator":
                await pool.unload("m")
            else:
                async with pool.use("m", keep_alive=0):
                    pass
            await asyncio.sleep(0.01)
            assert pool.catalog()[0].state == "unloaded"
            await asyncio.wait_for(pool.load("m"), 1)
            await asyncio.sleep(0.05)
            assert pool.catalog()[0].state == "ready" and pool.catalog()[0].expires_at is None
        assert len(loads) == 3  # once at first, once after each unload
    finally:
        await pool.stop()


@pytest.mark.anyio
async def test_a_stop_ends_a_load_that_waits_for_room_at_once() -> None:
    """A load waiting for a busy model to make room ends when the pool stops, without waiting
    out `load_wait_seconds` (the server's SIGTERM waits for it)."""
    models = (ModelConfig(id="a", path="a.gguf", load="lazy"), ModelConfig(id="b", path="b.gguf", load="lazy"))
    settings = Settings(models=models, max_loaded_models=1, load_wait_seconds=60)
    pool = ModelPool(settings, engine_factory=lambda c, t: FakeEngine(c))
    await pool.start()
    release = asyncio.Event()

    async def busy() -> None:
        async with pool.use("b"):
            await release.wait()

    holder = asyncio.create_task(busy())
    await asyncio.sleep(0.01)
    waiting = asyncio.create_task(pool.load("a"))  # the stop comes to a first, and b's request is still on
    await asyncio.sleep(0.01)
    assert not waiting.done()
    started = time.monotonic()
    await asyncio.wait_for(pool.stop(), 2)
    assert time.monotonic() - started < 1
    refusal = await asyncio.gather(waiting, return_exceptions=True)
    assert "stopping" in str(refusal[0]) and pool.catalog()[0].state == "unloaded"
    release.set()
    await holder


def test_the_inference_thread_ends_in_no_virtual_time() -> None:
    """A pool's stop waits for its thread to end. Polled on a timer, that wait ran the virtual
    clock on by up to 5 s per stop on a busy 2-core machine, and now and then a machine's stop
    overran its bound: the wait must be the thread's, which the loop sees."""
    loop = _VirtualLoop()
    thread = InferenceThread(name="test-inference")
    release = threading.Event()

    async def stop_while_busy() -> float:
        thread.start()
        busy = asyncio.ensure_future(thread.call(release.wait))
        await asyncio.sleep(0)
        threading.Timer(0.2, release.set).start()  # the thread ends 0.2 s of real time from now
        began = loop.time()
        await thread.stop()
        await busy
        return loop.time() - began

    try:
        assert loop.run_until_complete(stop_while_busy()) < 1.0
    finally:
        loop.close()
    assert not thread.alive
