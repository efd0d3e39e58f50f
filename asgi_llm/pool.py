"""The model pool: owns model lifecycle and the one inference thread every local model uses."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from .config import ModelConfig, Settings
from .core import Engine, ModelCard, ModelNotFound, ModelNotReady, ModelState
from .engines.inference_thread import InferenceThread

__all__ = ["ModelPool", "EngineFactory"]

log = logging.getLogger("asgi_llm.pool")

EngineFactory = Callable[[ModelConfig, InferenceThread], Engine]


def _llama_engine(config: ModelConfig, thread: InferenceThread) -> Engine:
    from .engines.llamacpp import LlamaCppEngine  # imported on first load, not at import time

    return LlamaCppEngine(config, thread)


class _Slot:
    def __init__(self, config: ModelConfig) -> None:
        self.config = config
        self.engine: Engine | None = None
        self.state: ModelState = "unloaded"
        self.error: str | None = None
        self.loading: asyncio.Task[None] | None = None


class ModelPool:
    """Loads models at start (or on first use), resolves names and aliases, reports health.

    Two apps may share one pool; it starts with its first user and stops with its last.
    """

    def __init__(self, settings: Settings | None = None, *, engine_factory: EngineFactory | None = None) -> None:
        self.settings = settings or Settings()
        self.thread = InferenceThread()
        self._factory = engine_factory or _llama_engine
        self._slots = [_Slot(config) for config in self.settings.models]
        self._by_name = {name: slot for slot in self._slots for name in slot.config.names}
        self._users = 0
        self._created = int(time.time())

    @property
    def started(self) -> bool:
        return self._users > 0

    async def start(self) -> None:
        """Start the inference thread and begin loading startup models (in the background)."""
        self._users += 1
        if self._users > 1:
            return
        self.thread.start()
        for slot in self._slots:
            if slot.config.load == "startup":
                self._begin_load(slot)

    async def stop(self) -> None:
        """Unload every model and end the inference thread, once the last user stops."""
        if self._users == 0:
            return
        self._users -= 1
        if self._users > 0:
            return
        for slot in self._slots:
            if slot.loading is not None:
                await asyncio.gather(slot.loading, return_exceptions=True)
            if slot.engine is not None:
                await slot.engine.close()
            slot.engine, slot.state, slot.loading = None, "unloaded", None
        await self.thread.stop()

    async def wait_ready(self) -> None:
        """Wait for the models that load at startup; raises if one failed."""
        await asyncio.gather(*(s.loading for s in self._slots if s.loading is not None))
        failed = [s.config.id for s in self._slots if s.state == "failed"]
        if failed:
            raise RuntimeError(f"model(s) failed to load: {', '.join(failed)}")

    async def engine(self, name: str) -> tuple[Engine, str]:
        """The engine serving `name` (an id or alias) and its canonical id."""
        slot = self._by_name.get(name)
        if slot is None:
            raise ModelNotFound(name)
        if slot.state == "ready" and slot.engine is not None:
            return slot.engine, slot.config.id
        if slot.state == "failed":
            raise ModelNotReady(f"The model '{slot.config.id}' failed to load.", retry_after=self.settings.retry_after_seconds * 30)
        if slot.state == "unloaded" and slot.config.load == "lazy":
            self._begin_load(slot)
        if slot.config.load == "lazy" and slot.loading is not None:
            await asyncio.shield(slot.loading)
            return await self.engine(name)
        raise ModelNotReady(f"The model '{slot.config.id}' is still loading.", retry_after=self.settings.retry_after_seconds)

    def loaded(self, name: str) -> Engine | None:
        """The engine for `name` if it is loaded now; never loads or waits."""
        slot = self._by_name.get(name)
        return slot.engine if slot is not None and slot.state == "ready" else None

    def catalog(self) -> list[ModelCard]:
        return [
            ModelCard(
                id=s.config.id,
                created=self._created,
                owned_by="asgi-llm",
                aliases=s.config.aliases,
                state=s.state,
                context_length=s.engine.context_length if s.engine is not None else s.config.n_ctx,
                embeddings=s.config.embeddings,
            )
            for s in self._slots
        ]

    def health(self) -> tuple[int, dict[str, Any]]:
        """200 when every startup model is ready; 503 while one loads or after one failed."""
        models = [self._slot_health(s) for s in self._slots]
        pending = [s for s in self._slots if s.config.load == "startup" and s.state != "ready"]
        failed = any(s.state == "failed" for s in self._slots)
        status = "error" if failed else "loading" if pending or not self.started else "ok"
        return (200 if status == "ok" else 503), {"status": status, "models": models}

    @staticmethod
    def _slot_health(slot: _Slot) -> dict[str, Any]:
        health: dict[str, Any] = {"id": slot.config.id, "state": slot.state}
        if slot.error:
            health["error"] = slot.error
        backend = slot.engine.describe() if slot.engine is not None else {}
        if backend:
            health["backend"] = dict(backend)
        return health

    def _begin_load(self, slot: _Slot) -> None:
        slot.state = "loading"
        slot.loading = asyncio.get_running_loop().create_task(self._load(slot))

    async def _load(self, slot: _Slot) -> None:
        started = time.perf_counter()
        try:
            engine = self._factory(slot.config, self.thread)
            await engine.load()
        except Exception as exc:
            slot.state, slot.error = "failed", type(exc).__name__
            log.error("loading model %s failed: %s", slot.config.id, exc)
            return
        slot.engine, slot.state = engine, "ready"
        log.info("model %s ready in %.1fs", slot.config.id, time.perf_counter() - started)
