"""One model the pool serves: its config, its engine once loaded, and where it stands."""

from __future__ import annotations

import asyncio  # only to type the loading task and the idle timer, asyncio's for the reasons in lifecycle.py
import logging
import os

from ..config import ModelConfig
from ..core import Engine, LLMError, ModelFacts, ModelState
from ..core.memory import MemoryEstimate

__all__ = ["ModelEntry", "file_size"]

log = logging.getLogger("asgi_llm.pool")


class ModelEntry:
    """A served model's record, which the pool's parts read and write: its config, its engine
    (loading or loaded), its state, the requests holding it, its idle timer and its memory cost."""

    def __init__(self, config: ModelConfig) -> None:
        self.config = config
        self.engine: Engine | None = None
        self.state: ModelState = "unloaded"
        self.error: str | None = None
        self.loading: asyncio.Task[LLMError | None] | None = None
        self.at_startup = False
        """Whether its load was begun by the pool's start (or a reload) rather than by a request:
        /health says `loading` until such a load ends. Requests wait for either kind."""
        self.active = 0
        self.keep_alive: float | None = config.keep_alive
        """Seconds idle before the next unload (None = never): the last request's, else the config's."""
        self.unload_pending = False
        self.expiry: asyncio.TimerHandle | None = None
        self.expires_at: float | None = None
        self.facts = ModelFacts()
        self.cost = MemoryEstimate()
        self.last_used = 0.0
        """When a request last held it (monotonic): the least recent idle model unloads first."""
        self.loading_engine: Engine | None = None  # the engine being loaded, for its `progress`
        self.pinned = config.pin  # the config's, until an operator pins or unpins it
        self.admitted = False  # a load past the residency limits, until it unloads

    @property
    def resident(self) -> bool:
        """Whether it counts against the residency limits: a local model loaded or loading."""
        return self.admitted and self.state in ("loading", "ready")

    @property
    def reported_state(self) -> ModelState:
        """Its state as reported: a loaded model whose engine says it cannot serve now is `stalled`."""
        if self.state == "ready" and self.engine is not None and self.engine.health().stalled is not None:
            return "stalled"
        return self.state

    @property
    def reported_error(self) -> str | None:
        """Why the model cannot serve: its load's failure, or what its engine says."""
        if self.state == "ready" and self.engine is not None:
            return self.engine.health().stalled
        return self.error

    @property
    def progress(self) -> float | None:
        """How far a loading model has read its weights (0 to 1); None unless it is loading."""
        if self.state != "loading":
            return None
        return round(float(self.loading_engine.progress), 3) if self.loading_engine is not None else 0.0

    @property
    def measured(self) -> MemoryEstimate | None:
        """What its engine allocated once loaded (None before, or for an upstream)."""
        return self.engine.memory if self.engine is not None else None

    def idle_time(self, requested: float | None) -> float | None:
        """The idle time a finished request leaves the model with (its `keep_alive`, seconds;
        negative = forever): an unload asked for meanwhile wins, and a request without one
        brings back the config's."""
        if self.unload_pending:
            return 0
        if requested is None:
            return self.config.keep_alive
        return None if requested < 0 else requested

    def disarm(self) -> None:
        """Cancel its idle unload."""
        if self.expiry is not None:
            self.expiry.cancel()
        self.expiry = self.expires_at = None

    async def unload(self) -> None:
        """Close its engine, if loaded: no idle timer, no residency, no unload pending after."""
        self.disarm()
        self.admitted = False
        self.unload_pending = False
        engine, self.engine = self.engine, None
        if self.state == "ready":
            self.state = "unloaded"
        if engine is not None:
            await engine.close()
            log.info("model %s unloaded", self.config.id)


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


def file_size(config: ModelConfig) -> int:
    """Bytes of a local model's GGUF file (0 for an upstream, or a file not there)."""
    if config.is_upstream:
        return 0
    try:
        return os.path.getsize(config.resolved_path())
    except (OSError, RuntimeError):
        return 0
