"""A model's life in the pool: loaded at start or on first use, held by requests, unloaded when
idle for its keep-alive or when asked, and the pool's start and stop around it all."""

from __future__ import annotations

# asyncio only for a model's loading task, which many requests await (each through `shield`) and which
# outlives the request that starts it, and for its idle timer (`call_later`): no task group's scope fits them
import asyncio
import contextlib
import logging
import math
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator

import anyio

from ..config import ModelConfig
from ..core import Engine, LLMError, ModelNotReady, Overloaded
from ..engines.inference_thread import InferenceThread
from ..support.tasks import spawn
from .entry import ModelEntry
from .residency import Residency, refuse_oversized_kv
from .roster import Roster

__all__ = ["EngineFactory", "Lifecycle", "engine_for"]

log = logging.getLogger("asgi_llm.pool")

EngineFactory = Callable[[ModelConfig, InferenceThread], Engine]
"""Makes a model's engine; it is handed the pool's inference thread and binds it where the engine runs there."""


def engine_for(config: ModelConfig, thread: InferenceThread) -> Engine:
    """A local GGUF on the inference thread, or an upstream server over HTTP, as the config says."""
    if config.is_upstream:
        from ..engines.upstream import UpstreamEngine  # imported on first load, not at import time

        return UpstreamEngine(config)
    from ..engines.llamacpp import LlamaCppEngine  # imported on first load, not at import time

    return LlamaCppEngine(config, thread)


class Lifecycle:
    """Starts and stops the pool, loads and unloads its models, and holds them for requests."""

    def __init__(self, models: Roster, residency: Residency, thread: InferenceThread, factory: EngineFactory) -> None:
        self._models = models
        self._residency = residency
        self._thread = thread
        self._factory = factory
        self._expiring: set[asyncio.Task[None]] = set()  # keep-alive unloads under way (the loop holds tasks weakly)

    async def start(self) -> None:
        """Start the inference thread and begin loading startup models (in the background)."""
        models = self._models
        if not models.join():
            return
        try:
            await self._discover()
            await refuse_oversized_kv(models.settings)
        except BaseException:
            models.leave()
            raise
        self._thread.start()
        async with anyio.create_task_group() as group:
            for entry in models.entries:
                group.start_soon(self._residency.read_facts, entry)
        self.load_startup(entry for entry in models.entries if entry.config.load == "startup")

    async def stop(self) -> None:
        """Unload every model and end the inference thread, once the last user stops."""
        models = self._models
        if not models.leave():
            return
        self._residency.freed()  # a load waiting for room hears the stop now: it ends without loading
        for entry in (*models.entries, *models.removed):
            if entry.loading is not None:  # ends within load_wait_seconds, or the engine's own load time
                await asyncio.gather(entry.loading, return_exceptions=True)
            await self._residency.release(entry)  # its load ended: no task left to wait for
        models.retired([])
        await self._thread.stop()

    async def wait_ready(self) -> None:
        """Wait for the models that load at startup; raises if one failed."""
        entries = self._models.entries
        await asyncio.gather(*(entry.loading for entry in entries if entry.loading is not None))
        failed = [entry.config.id for entry in entries if entry.state == "failed"]
        if failed:
            raise RuntimeError(f"model(s) failed to load: {', '.join(failed)}")

    def load_startup(self, entries: Iterable[ModelEntry]) -> None:
        """Begin loading those of `entries` (startup models) that the residency limits let load
        together; the rest load on first use."""
        for entry in self._residency.startup(entries):
            self._begin_load(entry, at_startup=True)

    @contextlib.asynccontextmanager
    async def use(self, name: str, keep_alive: float | None) -> AsyncIterator[tuple[Engine, str]]:
        """The engine serving `name` and its canonical id, held for one request (see `ModelPool.use`)."""
        entry = self._models.find(name)
        settings = self._models.settings
        if sum(other.holders.count for other in self._models.entries) >= settings.max_pending:
            raise Overloaded("The server is busy; retry shortly.", retry_after=settings.retry_after_seconds)
        with self._held(entry, keep_alive):
            yield await self._ready(entry, entry.config.queue_timeout), entry.config.id

    async def load(self, name: str) -> None:
        """Load `name` now and wait until it is ready (see `ModelPool.load`)."""
        entry = self._models.find(name)
        entry.reset()  # an operator's explicit load retries a failed one
        with self._held(entry, None):
            await self._ready(entry, None)

    async def unload(self, name: str) -> None:
        """Unload `name` now, or when its requests finish or its load ends (see `ModelPool.unload`)."""
        entry = self._models.find(name)
        if entry.ask_unload():
            await self._residency.release(entry)

    def pin(self, name: str, pinned: bool) -> None:
        """Pin or unpin `name` (see `ModelPool.pin`): a pinned model has no idle unload."""
        entry = self._models.find(name)
        if self._residency.pin(entry, pinned) and not pinned:
            self._arm(entry)

    async def retire(self, entry: ModelEntry) -> None:
        """Unload now if idle, else when its requests finish (once a load in progress has ended)."""
        if entry.loading is not None and not entry.loading.done():
            await asyncio.gather(entry.loading, return_exceptions=True)
        if entry.ask_unload():
            await self._residency.release(entry)

    @contextlib.contextmanager
    def _held(self, entry: ModelEntry, keep_alive: float | None) -> Iterator[None]:
        """Hold `entry` for one caller: no idle unload (nor one to make room) while it does; on
        release, its idle time is `keep_alive`'s (see `Holders.let_go`)."""
        entry.holders.take()  # from now: a load it waits for must not arm the idle unload under it
        try:
            yield
        finally:
            if entry.holders.let_go(keep_alive, entry.config.keep_alive):
                self._residency.freed()
                self._arm(entry)

    async def _ready(self, entry: ModelEntry, timeout: float | None) -> Engine:
        """The engine of an entry its caller holds, loading it if unloaded. A load in progress,
        begun at startup or by another request, is waited for as one this call begins: up to
        `timeout` seconds in all (None: until it ends), then ModelNotReady with `Retry-After`
        while the load goes on. A load that fails wakes its waiters with the failure. Nothing
        but a stop unloads a held model; should one unload between its load and this use all
        the same, it loads once more, not again: then ModelNotReady, never a loop."""
        name, retry = entry.config.id, self._models.settings.retry_after_seconds
        with anyio.move_on_after(math.inf if timeout is None else timeout) as waiting:
            for loads in range(3):
                if entry.state == "ready" and entry.engine is not None:
                    return entry.engine
                if entry.state == "failed":
                    raise ModelNotReady(f"The model '{name}' failed to load.", retry_after=retry * 30)
                if entry.state == "unloaded":
                    if not self._models.started:
                        raise ModelNotReady("The model server is not running.")
                    if loads == 2:
                        break
                    self._begin_load(entry, at_startup=False)
                if entry.loading is None:  # loading, with no task: only while the pool stops
                    raise ModelNotReady("The model server is not running.")
                refusal = await asyncio.shield(entry.loading)  # the load goes on if this wait ends
                if refusal is not None:
                    raise refusal
        if waiting.cancelled_caught:
            message = f"This request waited {timeout:g} s for the model '{name}' to load; retry shortly."
            raise ModelNotReady(message, retry_after=retry)
        raise ModelNotReady(f"The model '{name}' was unloaded as it loaded.", retry_after=retry)

    def _begin_load(self, entry: ModelEntry, *, at_startup: bool) -> None:
        name = f"load of {entry.config.id}"  # its waiters take its failure: none logged here
        entry.begin_load(lambda: spawn(self._load(entry), name=name, log=None), at_startup=at_startup)

    async def _load(self, entry: ModelEntry) -> LLMError | None:
        """Load it once the residency limits leave room; the refusal when they cannot (the entry
        goes back to unloaded, so a later request tries again)."""
        started = time.perf_counter()
        if not entry.config.is_upstream:
            try:
                await self._residency.make_room(entry)
            except LLMError as refusal:
                entry.refuse()
                log.warning("model %s not loaded: %s", entry.config.id, refusal.message)
                return refusal
        try:
            engine = self._factory(entry.config, self._thread)
            entry.loading_with(engine)
            await engine.load()
        except Exception as exc:  # noqa: BLE001 (a failed load is the model's state, shown by /health)
            entry.fail(type(exc).__name__)
            self._residency.freed()
            log.error("loading model %s failed: %s", entry.config.id, exc)
            return None
        entry.ready(engine)
        self._arm(entry)
        log.info("model %s ready in %.1fs", entry.config.id, time.perf_counter() - started)
        return None

    def _arm(self, entry: ModelEntry) -> None:
        """Schedule the idle unload its keep-alive asks for (see `ModelEntry.arm`)."""
        expire = f"keep-alive unload of {entry.config.id}"
        entry.arm(lambda: self._begin_expiry(entry, expire))

    def _begin_expiry(self, entry: ModelEntry, name: str) -> None:
        task = spawn(self._expire(entry), name=name, log=log)
        self._expiring.add(task)
        task.add_done_callback(self._expiring.discard)

    async def _expire(self, entry: ModelEntry) -> None:
        if entry.holders.count == 0 and entry.state == "ready":
            await self._residency.release(entry)

    async def _discover(self) -> None:
        """Upstream models with `discover = true` become the models their upstream lists now: at
        every start, in whatever host runs the lifespan (a restart sees a changed list)."""
        models = self._models
        if not any(m.is_upstream and m.discover for m in models.configured.models):
            return
        from ..engines.upstream import discover_settings  # imported only when discovery is asked for

        models.serve(await discover_settings(models.configured))
