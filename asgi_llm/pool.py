"""The model pool: owns model lifecycle and the one inference thread every local model uses."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, NamedTuple

from .config import ModelConfig, Settings
from .core import (
    Engine,
    EngineHealth,
    InsufficientMemory,
    LLMError,
    ModelCard,
    ModelFacts,
    ModelNotFound,
    ModelNotReady,
    ModelState,
    Overloaded,
)
from .engines.gguf_metadata import read_facts
from .engines.inference_thread import InferenceThread
from .engines.memory_estimate import MemoryEstimate, estimate_memory

__all__ = ["ModelPool", "EngineFactory"]

log = logging.getLogger("asgi_llm.pool")

EngineFactory = Callable[[ModelConfig, InferenceThread], Engine]
"""Makes a model's engine; it is handed the pool's inference thread and binds it where the engine runs there."""


def _engine_for(config: ModelConfig, thread: InferenceThread) -> Engine:
    """A local GGUF on the inference thread, or an upstream server over HTTP, as the config says."""
    if config.is_upstream:
        from .engines.upstream import UpstreamEngine  # imported on first load, not at import time

        return UpstreamEngine(config)
    from .engines.llamacpp import LlamaCppEngine  # imported on first load, not at import time

    return LlamaCppEngine(config, thread)


def _idle_policy(slot: _Slot, requested: float | None) -> float | None:
    """The idle time a finished request leaves its model with: an unload asked for meanwhile wins."""
    if slot.unload_pending:
        return 0
    if requested is None:
        return slot.config.keep_alive
    return None if requested < 0 else requested


class _Slot:
    def __init__(self, config: ModelConfig) -> None:
        self.config = config
        self.engine: Engine | None = None
        self.state: ModelState = "unloaded"
        self.error: str | None = None
        self.loading: asyncio.Task[LLMError | None] | None = None
        self.waited = False  # requests wait for on-demand loads; during startup loading they get 503
        self.active = 0
        self.keep_alive: float | None = config.keep_alive
        """Seconds idle before the next unload (None = never): the last request's, else the config's."""
        self.unload_pending = False
        self.expiry: asyncio.TimerHandle | None = None
        self.expires_at: float | None = None
        self.facts = ModelFacts()
        self.cost = MemoryEstimate()
        self.last_used = 0.0
        self.loading_engine: Engine | None = None  # the engine being loaded: its `progress`, if it reports one
        self.pinned = config.pin  # the config's, until an operator pins or unpins it
        self.admitted = False  # a load past the residency limits, until it unloads
        """When a request last held it (monotonic): the least recent idle model unloads first."""

    @property
    def resident(self) -> bool:
        """Whether it counts against the residency limits: a local model loaded or loading."""
        return self.admitted and self.state in ("loading", "ready")


def _state(slot: _Slot) -> ModelState:
    """The slot's state as reported: a loaded model whose engine says it cannot serve now is `stalled`."""
    if slot.state == "ready" and slot.engine is not None and slot.engine.health().stalled is not None:
        return "stalled"
    return slot.state


def _error(slot: _Slot) -> str | None:
    """Why the model cannot serve: its load's failure, or what its engine says."""
    if slot.state == "ready" and slot.engine is not None:
        return slot.engine.health().stalled
    return slot.error


def _on_gpu(device: int, slot: _Slot) -> int:
    return slot.cost.on_gpu(device)


class _Limit(NamedTuple):
    """A residency limit a load would exceed: how to name it, and what each model holds of it
    (unloading a model that holds none of it makes no room)."""

    text: str
    held: Callable[[_Slot], int]


class ModelPool:
    """Loads models at start (or on first use), resolves names and aliases, reports health.

    Two apps may share one pool; it starts with its first user and stops with its last.
    """

    def __init__(self, settings: Settings | None = None, *, engine_factory: EngineFactory | None = None) -> None:
        self.settings = self._configured = settings or Settings()
        self.thread = InferenceThread()
        self._factory = engine_factory or _engine_for
        self._slots: list[_Slot] = []
        self._removed: list[_Slot] = []  # dropped by a reload while requests still held them
        self._by_name: dict[str, _Slot] = {}
        self._serve(self.settings)
        self._users = 0
        self._created = int(time.time())
        self.reloaded: list[Callable[[Settings], None]] = []
        """Called with the new settings after each `reload` (the auth layer re-reads its keys)."""
        self._admission = asyncio.Lock()  # one load at a time decides what it unloads
        self._room = asyncio.Event()  # set whenever a model unloads or goes idle

    @property
    def started(self) -> bool:
        return self._users > 0

    async def start(self) -> None:
        """Start the inference thread and begin loading startup models (in the background)."""
        self._users += 1
        if self._users > 1:
            return
        try:
            await self._discover()
        except BaseException:
            self._users -= 1
            raise
        self.thread.start()
        await asyncio.gather(*(self._read_facts(slot) for slot in self._slots))
        for slot in self._slots:
            if slot.config.load != "startup":
                continue
            if self._shortfall(slot, [s for s in self._slots if s.resident]) is None:
                self._begin_load(slot, waited=False)
            else:  # startup loads never unload each other: the rest load on first use
                log.info("model %s left unloaded at startup: it would exceed the residency limits", slot.config.id)

    async def stop(self) -> None:
        """Unload every model and end the inference thread, once the last user stops."""
        if self._users == 0:
            return
        self._users -= 1
        if self._users > 0:
            return
        self._room.set()  # a load waiting for room hears the stop now: it ends without loading
        for slot in (*self._slots, *self._removed):
            if slot.loading is not None:  # ends within load_wait_seconds, or the engine's own load time
                await asyncio.gather(slot.loading, return_exceptions=True)
            await self._unload(slot)
            slot.loading = None
        self._removed.clear()
        await self.thread.stop()

    async def wait_ready(self) -> None:
        """Wait for the models that load at startup; raises if one failed."""
        await asyncio.gather(*(s.loading for s in self._slots if s.loading is not None))
        failed = [s.config.id for s in self._slots if s.state == "failed"]
        if failed:
            raise RuntimeError(f"model(s) failed to load: {', '.join(failed)}")

    def resolve(self, name: str) -> str | None:
        """The id of the model `name` (an id or alias) names, or None."""
        slot = self._by_name.get(name)
        return slot.config.id if slot is not None else None

    @contextlib.asynccontextmanager
    async def use(self, name: str, *, keep_alive: float | None = None) -> AsyncIterator[tuple[Engine, str]]:
        """The engine serving `name` (an id or alias) and its canonical id, held for one request.

        Loads an unloaded model and waits for it. `keep_alive` (seconds; negative = forever,
        0 = unload when idle) is how long the model stays loaded once this request leaves it
        idle; a request without one brings back the model's configured `keep_alive`, as
        Ollama's requests without one bring back its default.
        """
        slot = self._slot(name)
        if sum(s.active for s in self._slots) >= self.settings.max_pending:
            raise Overloaded("The server is busy; retry shortly.", retry_after=self.settings.retry_after_seconds)
        with self._held(slot, keep_alive):
            yield await self._ready(slot), slot.config.id

    async def load(self, name: str) -> None:
        """Load `name` now (unloading others as the residency limits ask) and wait until it is ready.

        It holds the model while it waits, as a request does, and leaves it with its configured
        `keep_alive` (as Ollama's load call without one does), not the 0 an earlier unload left.
        An unload still waiting for requests in flight happens all the same when they finish.
        """
        slot = self._slot(name)
        if slot.state == "failed":  # an operator's explicit load retries a failed one
            slot.state, slot.error = "unloaded", None
        if slot.state == "loading":
            slot.waited = True
        with self._held(slot, None):
            await self._ready(slot)

    @contextlib.contextmanager
    def _held(self, slot: _Slot, keep_alive: float | None) -> Iterator[None]:
        """Hold `slot` for one caller: no idle unload (nor one to make room) while it does; on
        release, its idle time is `keep_alive`'s (see `_idle_policy`)."""
        slot.active += 1  # from now: a load it waits for must not arm the idle unload under it
        slot.last_used = time.monotonic()
        self._disarm(slot)
        try:
            yield
        finally:
            slot.active -= 1
            slot.last_used = time.monotonic()
            slot.keep_alive = _idle_policy(slot, keep_alive)
            if slot.active == 0:
                self._room.set()
                self._arm(slot)

    @staticmethod
    def _progress(slot: _Slot) -> float | None:
        """How far a loading model has read its weights (0 to 1), when its engine says."""
        if slot.state != "loading":
            return None
        fraction = getattr(slot.loading_engine, "progress", None)
        return round(float(fraction), 3) if isinstance(fraction, (int, float)) else 0.0

    def pin(self, name: str, pinned: bool = True) -> None:
        """Pin (never unloaded to make room, nor when idle) or unpin `name`, until a reload changes its config."""
        slot = self._slot(name)
        if slot.pinned == pinned:
            return
        slot.pinned = pinned
        if pinned:
            self._disarm(slot)
        elif slot.active == 0:
            self._arm(slot)
        self._room.set()

    def residency(self) -> list[dict[str, Any]]:
        """Every model's state, estimated and (loaded) actual memory, pin and last use: the operators' model list."""
        now, wall = time.monotonic(), time.time()
        return [
            {
                "id": s.config.id,
                "aliases": list(s.config.aliases),
                "state": _state(s),
                **({"progress": self._progress(s)} if s.state == "loading" else {}),
                **({"error": error} if (error := _error(s)) else {}),
                "backend": "upstream" if s.config.is_upstream else "local",
                "pinned": s.pinned,
                "estimated_memory": None if s.config.is_upstream else s.cost.as_dict(),
                "actual_memory": measured.as_dict() if (measured := self._measured(s)) is not None else None,
                "requests_in_flight": s.active,
                "last_used": round(wall - (now - s.last_used), 3) if s.last_used else None,
                "expires_at": s.expires_at,
            }
            for s in self._slots
        ]

    async def unload(self, name: str) -> None:
        """Unload now, unless requests are using it or it is loading (then it unloads when they
        finish, or once it has loaded)."""
        slot = self._slot(name)
        slot.keep_alive, slot.unload_pending = 0, True
        if slot.active == 0 and slot.state != "loading":
            await self._unload(slot)

    async def reload(self, settings: Settings | None = None) -> None:
        """Serve `settings` (default: the same ones re-read: `models_dir` rescanned, the keys
        file re-read) without a restart. New models are added (unloaded until used or, with
        `load = "startup"`, loading now); removed ones leave the list at once and unload when
        their requests finish; changed ones take their new options and reload when idle.
        Requests in flight are never cut."""
        if settings is not None:
            self._configured = settings
        new = self._configured
        if any(m.is_upstream and m.discover for m in new.models):
            from .engines.upstream import discover_settings  # imported only when discovery is asked for

            new = await discover_settings(new)
        new = new.with_models_dir()
        old = {slot.config.id: slot for slot in self._slots}
        slots: list[_Slot] = []
        for config in new.models:
            slot = old.pop(config.id, None)
            if slot is None:
                slot = _Slot(config)
                if self.started:
                    await self._read_facts(slot)
            elif slot.config != config:
                log.info("model %s changed: it reloads when idle", config.id)
                slot.config, slot.pinned = config, config.pin
                if self.started:
                    await self._read_facts(slot)
                if slot.state in ("ready", "loading") or slot.engine is not None:
                    await self._retire(slot)
                if slot.state == "failed":
                    slot.state, slot.error = "unloaded", None
            slots.append(slot)
        for slot in old.values():
            log.info("model %s removed", slot.config.id)
            await self._retire(slot)
        self._removed = [s for s in (*self._removed, *old.values()) if s.engine is not None]
        self.settings = new
        self._slots = slots
        for slot in slots if self.started else ():
            if not slot.config.is_upstream:
                self._estimate(slot)  # the budget may name other GPUs now
        self._by_name = {name: slot for slot in slots for name in slot.config.names}
        for callback in self.reloaded:
            callback(new)
        if self.started:
            for slot in slots:
                idle_startup = slot.config.load == "startup" and slot.state == "unloaded" and slot.engine is None
                if idle_startup and self._shortfall(slot, [s for s in self._slots if s.resident]) is None:
                    slot.keep_alive = slot.config.keep_alive  # not an earlier unload's 0: it would unload at once
                    self._begin_load(slot, waited=False)

    async def _retire(self, slot: _Slot) -> None:
        """Unload now if idle, else when its requests finish."""
        if slot.loading is not None and not slot.loading.done():
            await asyncio.gather(slot.loading, return_exceptions=True)
        slot.keep_alive, slot.unload_pending = 0, True
        if slot.active == 0:
            await self._unload(slot)

    def _serve(self, settings: Settings) -> None:
        settings = settings.with_models_dir()
        self.settings = settings
        self._slots = [_Slot(config) for config in settings.models]
        self._by_name = {name: slot for slot in self._slots for name in slot.config.names}

    async def _discover(self) -> None:
        """Upstream models with `discover = true` become the models their upstream lists now: at
        every start, in whatever host runs the lifespan (a restart sees a changed list)."""
        if not any(m.is_upstream and m.discover for m in self._configured.models):
            return
        from .engines.upstream import discover_settings  # imported only when discovery is asked for

        self._serve(await discover_settings(self._configured))

    async def _read_facts(self, slot: _Slot) -> None:
        """The GGUF header's facts, read once per start off the event loop, so that model lists
        describe even a model that has not been loaded."""
        if slot.config.is_upstream:
            return
        try:
            path = slot.config.resolved_path()
        except RuntimeError:  # no packaged model: loading will say so
            return
        slot.facts = await asyncio.to_thread(read_facts, path)
        self._estimate(slot)

    def _estimate(self, slot: _Slot) -> None:
        gpus = len(self.settings.gpu_memory_budget or ()) or 1  # the devices the budget names
        slot.cost = estimate_memory(slot.config, slot.facts, self._file_size(slot.config), gpus=gpus)

    def _slot(self, name: str) -> _Slot:
        slot = self._by_name.get(name)
        if slot is None:
            raise ModelNotFound(name)
        return slot

    async def _ready(self, slot: _Slot) -> Engine:
        """The engine of a slot its caller holds, loading it if unloaded. Nothing but a stop
        unloads a held model; should one unload between its load and this use all the same, it
        loads once more, not again: then ModelNotReady, never a loop."""
        name, retry = slot.config.id, self.settings.retry_after_seconds
        for loads in range(3):
            if slot.state == "ready" and slot.engine is not None:
                return slot.engine
            if slot.state == "failed":
                raise ModelNotReady(f"The model '{name}' failed to load.", retry_after=retry * 30)
            if slot.state == "unloaded":
                if not self.started:
                    raise ModelNotReady("The model server is not running.")
                if loads == 2:
                    break
                self._begin_load(slot, waited=True)
            if not slot.waited or slot.loading is None:
                raise ModelNotReady(f"The model '{name}' is still loading.", retry_after=retry)
            refusal = await asyncio.shield(slot.loading)
            if refusal is not None:
                raise refusal
        raise ModelNotReady(f"The model '{name}' was unloaded as it loaded.", retry_after=retry)

    def _arm(self, slot: _Slot) -> None:
        """Schedule the idle unload its keep-alive asks for (a pinned model's only by an explicit unload)."""
        if slot.keep_alive is None or slot.state != "ready" or (slot.pinned and not slot.unload_pending):
            return
        loop = asyncio.get_running_loop()
        slot.expires_at = time.time() + slot.keep_alive
        slot.expiry = loop.call_later(slot.keep_alive, lambda: loop.create_task(self._expire(slot)))

    @staticmethod
    def _disarm(slot: _Slot) -> None:
        if slot.expiry is not None:
            slot.expiry.cancel()
        slot.expiry = slot.expires_at = None

    async def _expire(self, slot: _Slot) -> None:
        if slot.active == 0 and slot.state == "ready":
            await self._unload(slot)

    async def _unload(self, slot: _Slot) -> None:
        self._disarm(slot)
        slot.admitted = False
        slot.unload_pending = False
        engine, slot.engine = slot.engine, None
        if slot.state == "ready":
            slot.state = "unloaded"
        if engine is not None:
            await engine.close()
            log.info("model %s unloaded", slot.config.id)
        self._room.set()

    def loaded(self, name: str) -> Engine | None:
        """The engine for `name` if it is loaded now; never loads or waits."""
        slot = self._by_name.get(name)
        return slot.engine if slot is not None and slot.state == "ready" else None

    def engine_health(self) -> list[tuple[str, EngineHealth]]:
        """Each loaded model's engine health (faults survived, stalls, restarts), for metrics."""
        return [(s.config.id, s.engine.health()) for s in self._slots if s.engine is not None]

    def queued(self, name: str) -> int:
        """Requests waiting for `name` behind the one being generated (0 when not loaded)."""
        engine = self.loaded(name)
        return int(getattr(engine, "waiting", 0)) if engine is not None else 0

    def catalog(self) -> list[ModelCard]:
        return [
            ModelCard(
                id=s.config.id,
                created=self._created,
                owned_by="asgi-llm",
                aliases=s.config.aliases,
                state=_state(s),
                context_length=s.engine.context_length if s.engine is not None else s.config.n_ctx,
                embeddings=s.config.embeddings,
                expires_at=s.expires_at,
                size=self._file_size(s.config),
                memory=memory.total,
                memory_vram=sum(memory.gpu),
                facts=s.facts,
            )
            for s, memory in ((s, self._measured(s) or s.cost) for s in self._slots)
        ]

    @staticmethod
    def _measured(slot: _Slot) -> MemoryEstimate | None:
        """What llama.cpp allocated for a loaded local model (None before, or for an upstream)."""
        memory = getattr(slot.engine, "memory", None)
        return memory if isinstance(memory, MemoryEstimate) else None

    @staticmethod
    def _file_size(config: ModelConfig) -> int:
        if config.is_upstream:
            return 0
        try:
            return os.path.getsize(config.resolved_path())
        except (OSError, RuntimeError):
            return 0

    def health(self) -> tuple[int, dict[str, Any]]:
        """200 when every startup model is ready; 503 while one loads, after one failed, or while a
        loaded one is stalled (its work made no progress: a fresh request could not be served)."""
        limited = self._limited
        models = [self._slot_health(s, limited) for s in self._slots]
        pending = [s for s in self._slots if s.config.load == "startup" and s.state == "loading" and not s.waited]
        failed = any(s.state == "failed" for s in self._slots)
        stalled = any(_state(s) == "stalled" for s in self._slots)
        status = "error" if failed else "stalled" if stalled else "loading" if pending or not self.started else "ok"
        body: dict[str, Any] = {"status": status, "models": models}
        if limited:
            body["residency"] = self._residency()
        return (200 if status == "ok" else 503), body

    @property
    def _limited(self) -> bool:
        s = self.settings
        return s.max_loaded_models is not None or s.memory_budget is not None or s.gpu_memory_budget is not None

    def _residency(self) -> dict[str, Any]:
        resident = [s for s in self._slots if s.resident]
        body: dict[str, Any] = {
            "max_loaded_models": self.settings.max_loaded_models,
            "memory_budget": self.settings.memory_budget,
            "loaded_models": len(resident),
            "estimated_bytes": sum(s.cost.ram for s in resident),
        }
        if (gpus := self.settings.gpu_memory_budget) is not None:
            body["gpu_memory_budget"] = list(gpus)
            body["estimated_gpu_bytes"] = [sum(s.cost.on_gpu(i) for s in resident) for i in range(len(gpus))]
        return body

    @staticmethod
    def _slot_health(slot: _Slot, limited: bool) -> dict[str, Any]:
        health: dict[str, Any] = {"id": slot.config.id, "state": _state(slot)}
        if slot.state == "loading":
            health["progress"] = ModelPool._progress(slot)
        if limited and not slot.config.is_upstream:
            health["estimated_memory"] = slot.cost.as_dict()
            health["pinned"] = slot.pinned
        if error := _error(slot):
            health["error"] = error
        backend = slot.engine.describe() if slot.engine is not None else {}
        if backend:
            health["backend"] = dict(backend)
        return health

    def _begin_load(self, slot: _Slot, *, waited: bool) -> None:
        slot.state, slot.waited = "loading", waited
        slot.loading = asyncio.get_running_loop().create_task(self._load(slot))

    async def _load(self, slot: _Slot) -> LLMError | None:
        """Load it once the residency limits leave room; the refusal when they cannot (the slot
        goes back to unloaded, so a later request tries again)."""
        started = time.perf_counter()
        if not slot.config.is_upstream:
            try:
                await self._make_room(slot)
            except LLMError as refusal:
                slot.state, slot.unload_pending = "unloaded", False
                log.warning("model %s not loaded: %s", slot.config.id, refusal.message)
                return refusal
        try:
            engine = slot.loading_engine = self._factory(slot.config, self.thread)
            await engine.load()
        except Exception as exc:
            slot.loading_engine = None
            slot.state, slot.error, slot.admitted, slot.unload_pending = "failed", type(exc).__name__, False, False
            self._room.set()
            log.error("loading model %s failed: %s", slot.config.id, exc)
            return None
        slot.engine, slot.state, slot.loading_engine = engine, "ready", None
        if slot.active == 0:
            self._arm(slot)
        log.info("model %s ready in %.1fs", slot.config.id, time.perf_counter() - started)
        return None

    def _shortfall(self, slot: _Slot, others: list[_Slot]) -> _Limit | None:
        """Which limit loading `slot` beside `others` (resident models) would exceed, or None."""
        others = [s for s in others if s is not slot]
        limit, budget = self.settings.max_loaded_models, self.settings.memory_budget
        if limit is not None and len(others) + 1 > limit:
            return _Limit(f"max_loaded_models = {limit}", lambda s: 1)
        if budget is not None and sum(s.cost.ram for s in others) + slot.cost.ram > budget:
            return _Limit(f"memory_budget = {budget} bytes", lambda s: s.cost.ram)
        for device, vram in enumerate(self.settings.gpu_memory_budget or ()):
            if sum(s.cost.on_gpu(device) for s in others) + slot.cost.on_gpu(device) > vram:
                return _Limit(f"gpu_memory_budget[{device}] = {vram} bytes", functools.partial(_on_gpu, device))
        return None

    @staticmethod
    def _cost_text(cost: MemoryEstimate) -> str:
        on_gpus = ", ".join(f"{b} on GPU {i}" for i, b in enumerate(cost.gpu) if b)
        return f"{cost.ram} bytes of RAM" + (f", {on_gpus}" if on_gpus else "")

    async def _make_room(self, slot: _Slot) -> None:
        """Unload least recently used idle, unpinned models until `slot` fits the limits.

        Requests in flight are never cut: a busy model is asked to unload when its requests
        finish, and this waits for that up to `load_wait_seconds`.
        """
        async with self._admission:
            deadline = time.monotonic() + self.settings.load_wait_seconds
            while True:
                if not self.started:
                    raise ModelNotReady("The model server is stopping.")
                self._room.clear()
                resident = [s for s in self._slots if s.resident and s is not slot]
                short = self._shortfall(slot, resident)
                if short is None:
                    slot.admitted = True
                    return
                pinned = [s for s in resident if s.pinned]
                limit = self._shortfall(slot, pinned)
                if limit is not None:
                    raise InsufficientMemory(
                        f"The model '{slot.config.id}' (estimated {self._cost_text(slot.cost)}) cannot be loaded within "
                        f"{limit.text}, even after unloading every unpinned model."
                    )
                movable = sorted((s for s in resident if not s.pinned and short.held(s) > 0), key=lambda s: s.last_used)
                idle = [s for s in movable if s.active == 0 and s.state == "ready"]
                if idle:
                    log.info("unloading model %s to make room for %s", idle[0].config.id, slot.config.id)
                    await self._unload(idle[0])
                    continue
                busy = [s for s in movable if s.state == "ready" and not s.unload_pending]
                if busy:  # unloads when its requests finish (Ollama's behaviour too)
                    busy[0].keep_alive, busy[0].unload_pending = 0, True
                left = deadline - time.monotonic()
                try:
                    await asyncio.wait_for(self._room.wait(), timeout=max(left, 0))
                except TimeoutError:
                    raise Overloaded(
                        f"The model '{slot.config.id}' waited {self.settings.load_wait_seconds:g}s for requests on other "
                        f"models to finish; loading it would exceed {short.text}.",
                        retry_after=self.settings.retry_after_seconds,
                    ) from None
