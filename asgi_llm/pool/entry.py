"""One model the pool serves: its config, its engine once loaded, and where it stands.

Its state changes only through its transitions, each checked against `MOVES` in one place
(`_move`): a load begun, given its engine, admitted, ready, failed or refused room; a failure
reset; an unload done. What requests holding it and its idle unload change is `Holders`': an
unload asked for (`ModelEntry.ask_unload`) is the one way any part of the pool asks for one."""

from __future__ import annotations

import asyncio  # only to type the loading task and the idle timer, asyncio's for the reasons in lifecycle.py
import logging
import os
import time
from collections.abc import Callable
from typing import Literal

from ..config import ModelConfig
from ..core import Engine, LLMError, ModelFacts, ModelState
from ..core.memory import MemoryEstimate

__all__ = ["MOVES", "Holders", "ModelEntry", "Transition", "adapters_size", "file_size", "projector_size"]

log = logging.getLogger("asgi_llm.pool")

Transition = Literal["begin_load", "loading_with", "admit", "ready", "fail", "refuse", "reset", "unload"]

MOVES: dict[Transition, tuple[frozenset[ModelState], ModelState | None]] = {
    "begin_load": (frozenset({"unloaded"}), "loading"),
    "loading_with": (frozenset({"loading"}), None),  # the engine made, now loading
    "admit": (frozenset({"loading"}), None),  # within the residency limits
    "ready": (frozenset({"loading"}), "ready"),
    "fail": (frozenset({"loading"}), "failed"),
    "refuse": (frozenset({"loading"}), "unloaded"),  # the residency limits left it no room
    "reset": (frozenset({"failed"}), "unloaded"),  # an operator's load, or a reload, tries again
    "unload": (frozenset({"ready"}), "unloaded"),
}
"""Each transition: the states it may start from, and the state it leaves (None: the same).
Any other move is a bug in the pool, raised as one. ("stalled" is only ever reported: a ready
model whose engine cannot serve now.)"""

LoadTask = asyncio.Task[LLMError | None]
"""A model's load: the refusal when the residency limits left it no room, else None (ready or failed)."""


class Holders:
    """The requests holding a model, and the idle unload the last one leaves it with."""

    def __init__(self, keep_alive: float | None) -> None:
        self.count = 0
        self.last_used = 0.0
        """When a request last held it (monotonic): the least recent idle model unloads first."""
        self.keep_alive = keep_alive
        """Seconds idle before the next unload (None = never): the last request's, else the config's."""
        self.unload_pending = False  # unload once the last holder lets go (or the load ends)
        self.expires_at: float | None = None  # when the idle unload armed now fires (Unix time)
        self._expiry: asyncio.TimerHandle | None = None

    def take(self) -> None:
        """One more request holds it: no idle unload until the last lets go."""
        self.count += 1
        self.last_used = time.monotonic()
        self.disarm()

    def let_go(self, requested: float | None, configured: float | None) -> bool:
        """A request lets go, leaving the idle time it asked for (its `keep_alive`, seconds;
        negative = forever): an unload asked for meanwhile wins, and a request without one brings
        back the config's. Whether it was the last holder."""
        self.count -= 1
        self.last_used = time.monotonic()
        if self.unload_pending:
            self.keep_alive = 0
        elif requested is None:
            self.keep_alive = configured
        else:
            self.keep_alive = None if requested < 0 else requested
        return self.count == 0

    def disarm(self) -> None:
        """Cancel its idle unload."""
        if self._expiry is not None:
            self._expiry.cancel()
        self._expiry = self.expires_at = None

    def _ask_unload(self) -> None:
        self.keep_alive, self.unload_pending = 0, True

    def _arm(self, seconds: float, expire: Callable[[], None]) -> None:
        self.expires_at = time.time() + seconds
        self._expiry = asyncio.get_running_loop().call_later(seconds, expire)

    def _forget(self, configured: float | None) -> None:
        """Unloaded: no idle timer, no unload pending, and the config's idle time again (not an
        earlier unload's 0, which would unload its next startup load at once)."""
        self.disarm()
        self.keep_alive, self.unload_pending = configured, False


class ModelEntry:
    """A served model's record, which the pool's parts read and change through its transitions:
    its config, its engine (loading or loaded), its state, its holders and its memory cost."""

    def __init__(self, config: ModelConfig) -> None:
        self.config = config
        self.state: ModelState = "unloaded"
        self.error: str | None = None  # why its load failed (state "failed")
        self.engine: Engine | None = None  # its engine while ready
        self.loading: LoadTask | None = None  # its load, awaited by every request that waits for it
        self.loading_engine: Engine | None = None  # the engine being loaded, for its `progress`
        self.at_startup = False
        """Whether its load was begun by the pool's start (or a reload) rather than by a request:
        /health says `loading` until such a load ends. Requests wait for either kind."""
        self.holders = Holders(config.keep_alive)
        self.pinned = config.pin  # the config's, until an operator pins or unpins it
        self.admitted = False  # a load within the residency limits, until it unloads
        self.facts = ModelFacts()
        self.cost = MemoryEstimate()

    @property
    def resident(self) -> bool:
        """Whether it counts against the residency limits: a local model loaded or loading."""
        return self.admitted and self.state in ("loading", "ready")

    @property
    def measured(self) -> MemoryEstimate | None:
        """What its engine allocated once loaded (None before, or for an upstream)."""
        return self.engine.memory if self.engine is not None else None

    def begin_load(self, start: Callable[[], LoadTask], *, at_startup: bool) -> None:
        """Unloaded → loading, by the task `start()` makes."""
        self._move("begin_load")
        self.at_startup = at_startup
        self.loading = start()

    def loading_with(self, engine: Engine) -> None:
        """The engine its load made and is loading now."""
        self._move("loading_with")
        self.loading_engine = engine

    def ready(self, engine: Engine) -> None:
        """Loading → ready, served by `engine`."""
        self._move("ready")
        self.engine, self.loading_engine = engine, None

    def fail(self, why: str) -> None:
        """Loading → failed (/health says `why` until it is reset)."""
        self._move("fail")
        self.error, self.loading_engine, self.admitted = why, None, False
        self.holders._forget(self.config.keep_alive)

    def refuse(self) -> None:
        """Loading → unloaded: the residency limits left it no room (a later request tries again)."""
        self._move("refuse")
        self.loading_engine, self.admitted = None, False
        self.holders._forget(self.config.keep_alive)

    def reset(self) -> None:
        """Failed → unloaded, the failure forgotten (an operator's load, a reload); any other state stays."""
        if self.state == "failed":
            self._move("reset")
            self.error = None

    def ask_unload(self) -> bool:
        """Unload it once idle (after its requests, or once its load ends): the one way an unload
        is asked for. Whether it may unload now (nothing holds it, and it is not loading)."""
        self.holders._ask_unload()
        return self.holders.count == 0 and self.state != "loading"

    async def unload(self) -> None:
        """Ready → unloaded, closing its engine; in any state, no idle timer, no residency and no
        unload pending after."""
        self.admitted = False
        self.holders._forget(self.config.keep_alive)
        engine, self.engine = self.engine, None
        if self.state == "ready":
            self._move("unload")
        if self.state != "loading":
            self.loading = None  # ended: a stop or a restart waits for none
        if engine is not None:
            await engine.close()
            log.info("model %s unloaded", self.config.id)

    def arm(self, expire: Callable[[], None]) -> None:
        """Schedule the idle unload its keep-alive asks for, `expire` then called on the event
        loop: only for a ready model that nothing holds (a pinned one's only when an unload was asked)."""
        holders, seconds = self.holders, self.holders.keep_alive
        if seconds is None or self.state != "ready" or holders.count or (self.pinned and not holders.unload_pending):
            return
        holders._arm(seconds, expire)

    def admit(self) -> None:
        """Its load fits the residency limits: it counts against them until it unloads."""
        self._move("admit")
        self.admitted = True

    def pin(self, pinned: bool) -> bool:
        """Pin (never unloaded to make room, nor when idle) or unpin it; whether that changed it."""
        changed, self.pinned = self.pinned != pinned, pinned
        if pinned:
            self.holders.disarm()
        return changed

    def reconfigure(self, config: ModelConfig) -> None:
        """A reload's new options for it (its pin and idle time the config's again); a loaded
        model still runs with the old ones until it reloads."""
        self.config, self.pinned = config, config.pin
        if not self.holders.unload_pending:
            self.holders.keep_alive = config.keep_alive
            if config.keep_alive is None or config.pin:  # never idle out now: an unload armed before is off
                self.holders.disarm()

    def estimated(self, facts: ModelFacts, cost: MemoryEstimate) -> None:
        """What its file's header says, and the memory it is estimated to take once loaded."""
        self.facts, self.cost = facts, cost

    def _move(self, transition: Transition) -> None:
        """The one check of a transition, and its state change."""
        starts, to = MOVES[transition]
        if self.state not in starts:
            raise RuntimeError(f"model {self.config.id}: no {transition} while {self.state}")
        self.state = self.state if to is None else to


def adapters_size(config: ModelConfig) -> int:
    """Bytes of a local model's LoRA adapter files (those not there count 0: their load fails
    with its own error)."""
    total = 0
    for adapter in config.lora:
        try:
            total += os.path.getsize(adapter.path)
        except OSError:
            pass
    return total


def projector_size(config: ModelConfig) -> int:
    """Bytes of a local model's vision projector file (`mmproj`; 0 without one, or one not there:
    its load fails with its own error)."""
    try:
        return os.path.getsize(config.mmproj) if config.mmproj is not None else 0
    except OSError:
        return 0


def file_size(config: ModelConfig) -> int:
    """Bytes of a local model's GGUF file (0 for an upstream, or a file not there)."""
    if config.is_upstream:
        return 0
    try:
        return os.path.getsize(config.resolved_path())
    except (OSError, RuntimeError):
        return 0
