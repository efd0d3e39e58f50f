"""`ModelPool`: the one object the app, the endpoint and the admin routes hold. It composes the
pool's parts and does no work of its own: `Lifecycle` and `Reloader` load, unload and reload,
`Residency` keeps the loaded models within the limits, `Status` reports."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

from ..config import Settings, fallback_chain
from ..core import Engine, EngineHealth, ModelCard
from ..engines.inference_thread import InferenceThread
from ..support.clients import Clients
from .lifecycle import EngineFactory, Lifecycle, engine_for
from .reload import Reloader
from .residency import Residency
from .roster import Roster
from .status import Status

__all__ = ["ModelPool"]


class ModelPool:
    """Loads models at start (or on first use), resolves names and aliases, reports health.

    Two apps may share one pool; it starts with its first user and stops with its last.
    """

    def __init__(self, settings: Settings | None = None, *, engine_factory: EngineFactory | None = None) -> None:
        self.thread = InferenceThread()
        self._factory = engine_factory or engine_for
        self._models = Roster(settings or Settings())
        self.reloaded: list[Callable[[Settings], None]] = []
        """Called with the new settings after each `reload` (the auth layer re-reads its keys)."""
        self.clients = Clients()
        """The clients of Redis and PostgreSQL its apps' layers and stores share, one per URL:
        made on first use, closed by the app's lifespan once the pool has stopped with its last user."""
        residency = Residency(self._models)
        self._lifecycle = Lifecycle(self._models, residency, self.thread, self._factory)
        self._reloader = Reloader(self._models, residency, self._lifecycle)
        self._status = Status(self._models, residency)

    @property
    def settings(self) -> Settings:
        """The settings served now (`models_dir`'s models and discovered ones included)."""
        return self._models.settings

    @property
    def started(self) -> bool:
        return self._models.started

    async def start(self) -> None:
        """Start the inference thread and begin loading startup models (in the background)."""
        await self._lifecycle.start()

    async def stop(self) -> None:
        """Unload every model and end the inference thread, once the last user stops."""
        await self._lifecycle.stop()

    async def wait_ready(self) -> None:
        """Wait for the models that load at startup; raises if one failed."""
        await self._lifecycle.wait_ready()

    def resolve(self, name: str) -> str | None:
        """The id of the model `name` (an id or alias) names, or None."""
        entry = self._models.by_name.get(name)
        return entry.config.id if entry is not None else None

    def chain(self, name: str) -> list[str]:
        """The ids a generation for `name` (an id or alias) tries in order: its model, then its
        `fallbacks`, each followed by its own; raises `ModelNotFound` for an unknown name."""
        entry = self._models.find(name)
        ids = {alias: found.config.id for alias, found in self._models.by_name.items()}
        return fallback_chain(entry.config.id, {e.config.id: e.config.fallbacks for e in self._models.entries}, ids)

    def use(self, name: str, *, keep_alive: float | None = None) -> AbstractAsyncContextManager[tuple[Engine, str]]:
        """The engine serving `name` (an id or alias) and its canonical id, held for one request.

        Loads an unloaded model and waits for it. `keep_alive` (seconds; negative = forever,
        0 = unload when idle) is how long the model stays loaded once this request leaves it
        idle; a request without one brings back the model's configured `keep_alive`, as
        Ollama's requests without one bring back its default.
        """
        return self._lifecycle.use(name, keep_alive)

    async def load(self, name: str) -> None:
        """Load `name` now (unloading others as the residency limits ask) and wait until it is ready.

        It holds the model while it waits, as a request does, and leaves it with its configured
        `keep_alive` (as Ollama's load call without one does), not the 0 an earlier unload left.
        An unload still waiting for requests in flight happens all the same when they finish.
        """
        await self._lifecycle.load(name)

    async def unload(self, name: str) -> None:
        """Unload now, unless requests are using it or it is loading (then it unloads when they
        finish, or once it has loaded)."""
        await self._lifecycle.unload(name)

    def pin(self, name: str, pinned: bool = True) -> None:
        """Pin (never unloaded to make room, nor when idle) or unpin `name`, until a reload changes its config."""
        self._lifecycle.pin(name, pinned)

    async def reload(self, settings: Settings | None = None) -> None:
        """Serve `settings` (default: the same ones re-read: `models_dir` rescanned, the keys
        file re-read) without a restart. New models are added (unloaded until used or, with
        `load = "startup"`, loading now); removed ones leave the list at once and unload when
        their requests finish; changed ones take their new options and reload when idle.
        Requests in flight are never cut."""
        await self._reloader.reload(settings, self.reloaded)

    def loaded(self, name: str) -> Engine | None:
        """The engine for `name` if it is loaded now; never loads or waits."""
        return self._models.loaded(name)

    def health(self) -> tuple[int, dict[str, Any]]:
        """200 when every startup model is ready; 503 while one loads, after one failed, or while a
        loaded one is stalled (its work made no progress: a fresh request could not be served)."""
        health = self._status.health()
        return health.code, health.body()

    def residency(self) -> list[dict[str, Any]]:
        """Every model's state, estimated and (loaded) actual memory, pin and last use: the operators' model list."""
        return self._status.residency()

    def catalog(self) -> list[ModelCard]:
        return self._status.catalog()

    def engine_health(self) -> list[tuple[str, EngineHealth]]:
        """Each loaded model's engine health (faults survived, stalls, restarts), for metrics."""
        return self._status.engine_health()

    def queued(self, name: str) -> int:
        """Requests waiting for `name` behind the one being generated (0 when not loaded)."""
        return self._status.queued(name)
