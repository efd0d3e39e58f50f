"""`ModelEntry`'s transitions under random sequences (hypothesis' stateful testing), on the record
alone: a load begun, given its engine, ready, failed or refused room; a failure reset; requests
holding it and letting go; an unload asked for, armed and done; pins, admissions and reloads.
After every step the invariants of a model's record hold, and a move `MOVES` does not allow is
refused with the record unchanged. test_pool_states.py drives the whole pool."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from asgi_llm import ModelConfig
from asgi_llm.core import ModelState
from asgi_llm.core.memory import MemoryEstimate
from asgi_llm.engines.fake import FakeEngine
from asgi_llm.pool.entry import MOVES, ModelEntry, Transition

T = TypeVar("T")
KEEP = 5.0  # the config's idle time
STATES: tuple[ModelState, ...] = ("unloaded", "loading", "ready", "failed")


class EntryMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.config = ModelConfig(id="m", path="m.gguf", load="lazy", keep_alive=KEEP)
        self.entry = ModelEntry(self.config)
        self.holding: list[float | None] = []  # the keep_alive each open request will let go with
        self.engines: list[FakeEngine] = []  # every engine made, in order
        self.expired = 0

    def run(self, call: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(call)

    def snapshot(self) -> tuple[object, ...]:
        e, h = self.entry, self.entry.holders
        return (e.state, e.error, e.engine, e.loading, e.loading_engine, e.admitted, e.pinned, h.count, h.keep_alive)

    # -- a load ------------------------------------------------------------------------

    @precondition(lambda self: self.entry.state == "unloaded")
    @rule(at_startup=st.booleans())
    def begin_load(self, at_startup: bool) -> None:
        async def begin() -> None:
            self.entry.begin_load(lambda: asyncio.ensure_future(asyncio.sleep(0, None)), at_startup=at_startup)

        self.run(begin())
        assert self.entry.at_startup is at_startup and self.entry.loading is not None

    @precondition(lambda self: self.entry.state == "loading" and not self.entry.admitted)
    @rule()
    def admit(self) -> None:
        self.entry.admit()
        assert self.entry.resident

    @precondition(lambda self: self.entry.state == "loading" and self.entry.loading_engine is None)
    @rule()
    def engine_made(self) -> None:
        self.engines.append(FakeEngine(self.config))
        self.entry.loading_with(self.engines[-1])

    @precondition(lambda self: self.entry.state == "loading" and self.entry.loading_engine is not None)
    @rule()
    def ready(self) -> None:
        engine = self.entry.loading_engine
        assert engine is not None
        self.entry.ready(engine)
        self.run(self._arm())  # what the lifecycle does once a load ends

    @precondition(lambda self: self.entry.state == "loading")
    @rule()
    def fail(self) -> None:
        self.entry.fail("OSError")
        assert self.entry.error == "OSError" and not self.entry.resident

    @precondition(lambda self: self.entry.state == "loading" and self.entry.loading_engine is None)
    @rule()
    def refuse(self) -> None:
        self.entry.refuse()
        assert self.entry.state == "unloaded" and not self.entry.holders.unload_pending

    @rule()
    def reset(self) -> None:
        before = self.entry.state
        self.entry.reset()
        assert self.entry.state == ("unloaded" if before == "failed" else before)

    # -- requests and the idle unload --------------------------------------------------

    @rule(keep_alive=st.sampled_from([None, 0.0, -1.0, 2.0]))
    def hold(self, keep_alive: float | None) -> None:
        self.entry.holders.take()
        self.holding.append(keep_alive)
        assert self.entry.holders.expires_at is None  # a held model has no idle unload armed

    @precondition(lambda self: bool(self.holding))
    @rule()
    def let_go(self) -> None:
        requested, pending = self.holding.pop(), self.entry.holders.unload_pending
        last = self.entry.holders.let_go(requested, self.config.keep_alive)
        assert last == (not self.holding)
        kept = self.entry.holders.keep_alive
        if pending:
            assert kept == 0
        else:
            configured = self.config.keep_alive
            assert kept == (configured if requested is None else None if requested < 0 else requested)
        if last:
            self.run(self._arm())

    async def _arm(self) -> None:
        def expire() -> None:
            self.expired += 1

        self.entry.arm(expire)

    @rule()
    def ask_unload(self) -> None:
        now = self.entry.ask_unload()
        assert self.entry.holders.unload_pending and self.entry.holders.keep_alive == 0
        assert now == (not self.holding and self.entry.state != "loading")

    @precondition(lambda self: self.entry.state != "loading" and not self.holding)
    @rule()
    def unload(self) -> None:
        engine = self.entry.engine
        self.run(self.entry.unload())
        assert self.entry.state in ("unloaded", "failed") and self.entry.loading is None
        assert not self.entry.holders.unload_pending and self.entry.holders.keep_alive == self.config.keep_alive
        assert engine is None or isinstance(engine, FakeEngine) and engine.closed

    @rule(pinned=st.booleans())
    def pin(self, pinned: bool) -> None:
        was = self.entry.pinned
        assert self.entry.pin(pinned) == (was != pinned)
        if pinned:
            assert self.entry.holders.expires_at is None

    @rule(pin=st.booleans(), keep=st.sampled_from([None, KEEP]))
    def reconfigure(self, pin: bool, keep: float | None) -> None:
        self.config = ModelConfig(id="m", path="m.gguf", load="lazy", keep_alive=keep, pin=pin)
        self.entry.reconfigure(self.config)
        assert self.entry.pinned is pin

    @rule()
    def estimated(self) -> None:
        self.entry.estimated(self.entry.facts, MemoryEstimate(weights=1))
        assert self.entry.cost.weights == 1

    # -- what no sequence may do ------------------------------------------------------

    @rule(transition=st.sampled_from(["begin_load", "loading_with", "admit", "ready", "fail", "refuse"]))
    def a_move_not_allowed_is_refused(self, transition: Transition) -> None:
        entry, engine = self.entry, FakeEngine(self.config)
        moves: dict[Transition, Callable[[], None]] = {
            "begin_load": lambda: entry.begin_load(lambda: pytest.fail("started"), at_startup=False),
            "loading_with": lambda: entry.loading_with(engine),
            "admit": entry.admit,
            "ready": lambda: entry.ready(engine),
            "fail": lambda: entry.fail("x"),
            "refuse": entry.refuse,
        }
        if entry.state in MOVES[transition][0]:
            return  # a legal move: the rules above make those
        before = self.snapshot()
        with pytest.raises(RuntimeError, match=f"model m: no {transition} while {entry.state}"):
            moves[transition]()
        assert self.snapshot() == before

    # -- invariants --------------------------------------------------------------------

    @invariant()
    def an_engine_only_while_ready(self) -> None:
        assert (self.entry.engine is not None) == (self.entry.state == "ready")

    @invariant()
    def an_engine_loading_only_while_loading(self) -> None:
        assert self.entry.loading_engine is None or self.entry.state == "loading"

    @invariant()
    def resident_only_loading_or_ready(self) -> None:
        assert not self.entry.admitted or self.entry.state in ("loading", "ready")

    @invariant()
    def an_error_only_when_failed(self) -> None:
        assert (self.entry.error is not None) == (self.entry.state == "failed")

    @invariant()
    def a_load_task_while_loading(self) -> None:
        assert self.entry.state != "loading" or self.entry.loading is not None

    @invariant()
    def holders_counted(self) -> None:
        assert self.entry.holders.count == len(self.holding)

    @invariant()
    def armed_only_when_ready_and_idle(self) -> None:
        entry, holders = self.entry, self.entry.holders
        if holders.expires_at is not None:
            assert entry.state == "ready" and holders.count == 0 and holders.keep_alive is not None
            assert not entry.pinned or holders.unload_pending

    @invariant()
    def a_pending_unload_idles_for_nothing(self) -> None:
        assert not self.entry.holders.unload_pending or self.entry.holders.keep_alive == 0

    @invariant()
    def a_known_state(self) -> None:
        assert self.entry.state in STATES

    def teardown(self) -> None:
        self.entry.holders.disarm()
        self.loop.run_until_complete(_cancel_all())
        self.loop.close()


async def _cancel_all() -> None:
    """End the load tasks a run left behind."""
    tasks = asyncio.all_tasks() - {asyncio.current_task()}
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


test_entry_states = EntryMachine.TestCase
