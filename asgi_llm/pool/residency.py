"""Residency: which local models may be loaded together within `max_loaded_models` and the
memory budgets (estimated from each GGUF header before loading), and which to unload to make
room: the least recently used idle, unpinned model first; a busy one when its requests finish."""

from __future__ import annotations

# asyncio only for `to_thread`: a GGUF header is read in the loop's own executor, which the loop can see
# and account for (a host's `set_default_executor`; the virtual clock of tests/test_pool/test_pool_states.py)
import asyncio
import functools
import logging
import time
from collections.abc import Callable, Iterable
from typing import NamedTuple

import anyio

from ..config import ModelConfig, Settings
from ..core import InsufficientMemory, ModelFacts, ModelNotReady, Overloaded
from ..core.memory import MemoryEstimate
from ..engines.gguf_metadata import read_facts
from ..engines.memory_estimate import estimate_memory, kv_refusal
from .entry import ModelEntry, adapters_size, file_size, projector_size
from .report import ResidencyReport
from .roster import Roster

__all__ = ["Residency", "refuse_oversized_kv"]

log = logging.getLogger("asgi_llm.pool")


class _Limit(NamedTuple):
    """A residency limit a load would exceed: how to name it, and what each model holds of it
    (unloading a model that holds none of it makes no room)."""

    text: str
    held: Callable[[ModelEntry], int]


def _on_gpu(device: int, entry: ModelEntry) -> int:
    return entry.cost.on_gpu(device)


def _cost_text(cost: MemoryEstimate) -> str:
    on_gpus = ", ".join(f"{b} on GPU {i}" for i, b in enumerate(cost.gpu) if b)
    return f"{cost.ram} bytes of RAM" + (f", {on_gpus}" if on_gpus else "")


async def refuse_oversized_kv(settings: Settings) -> None:
    """A ValueError with the figures if a local model's KV cache alone exceeds a budget: the
    check of settings that needs their GGUF headers, made when the pool starts or reloads."""
    if settings.memory_budget is None and settings.gpu_memory_budget is None:
        return
    for config in settings.models:
        if config.is_upstream:
            continue
        try:
            path = config.resolved_path()
        except RuntimeError:  # no packaged model: loading will say so
            continue
        refusal = kv_refusal(config, await asyncio.to_thread(read_facts, path), settings)
        if refusal is not None:
            raise ValueError(refusal)


class Residency:
    """Admits loads within the limits of the roster's settings, unloading others to make room."""

    def __init__(self, models: Roster) -> None:
        self._models = models
        self._admission = anyio.Lock(fast_acquire=True)  # one load at a time decides what it unloads
        self._room = anyio.Event()  # set whenever a model unloads or goes idle (a fresh one for each wait)

    @property
    def limited(self) -> bool:
        s = self._models.settings
        return s.max_loaded_models is not None or s.memory_budget is not None or s.gpu_memory_budget is not None

    def summary(self) -> ResidencyReport:
        """The limits and what the resident models hold of them, for /health."""
        settings, resident = self._models.settings, self._models.resident()
        gpus = settings.gpu_memory_budget
        held = None if gpus is None else tuple(sum(s.cost.on_gpu(i) for s in resident) for i in range(len(gpus)))
        return ResidencyReport(
            max_loaded_models=settings.max_loaded_models,
            memory_budget=settings.memory_budget,
            loaded_models=len(resident),
            estimated_bytes=sum(s.cost.ram for s in resident),
            gpu_memory_budget=None if gpus is None else tuple(gpus),
            estimated_gpu_bytes=held,
        )

    async def read_facts(self, entry: ModelEntry) -> None:
        """The GGUF header's facts, read once per start off the event loop, so that model lists
        describe even a model that has not been loaded; and the cost estimated from them."""
        if entry.config.is_upstream:
            return
        try:
            path = entry.config.resolved_path()
        except RuntimeError:  # no packaged model: loading will say so
            return
        self.estimate(entry, await asyncio.to_thread(read_facts, path))

    def estimate(self, entry: ModelEntry, facts: ModelFacts | None = None) -> None:
        """The memory `entry` takes once loaded, from its header's `facts` (default: those read before)."""
        facts = entry.facts if facts is None else facts
        gpus = len(self._models.settings.gpu_memory_budget or ()) or 1  # the devices the budget names
        config = entry.config
        cost = estimate_memory(
            config,
            facts,
            file_size(config),
            gpus=gpus,
            adapters=adapters_size(config),
            projector=projector_size(config),
        )
        entry.estimated(facts, cost + draft_cost(config, gpus) if config.draft_model else cost)

    def startup(self, entries: Iterable[ModelEntry]) -> list[ModelEntry]:
        """Those of `entries` (startup models, in config order) that fit the limits together
        beside the models loaded or loading now: startup loads unload nothing, not even each
        other. The rest stay unloaded at once, each with a warning naming the limit, and load
        on first use."""
        beside = self._models.resident()
        fitting: list[ModelEntry] = []
        for entry in entries:
            limit = None if entry.config.is_upstream else self._shortfall(entry, beside)
            if limit is None:
                fitting.append(entry)
                if not entry.config.is_upstream:
                    beside.append(entry)
                continue
            others = ", ".join(other.config.id for other in beside)
            log.warning(
                "model %s left unloaded at startup: loading it %s would exceed %s (it loads on first use)",
                entry.config.id,
                f"beside {others}" if others else "alone",
                limit.text,
            )
        return fitting

    def pin(self, entry: ModelEntry, pinned: bool) -> bool:
        """Pin (never unloaded to make room) or unpin `entry`; whether that changed it."""
        if not entry.pin(pinned):
            return False
        self._room.set()
        return True

    def freed(self) -> None:
        """Wake a load waiting for room: a model unloaded, went idle or was unpinned, a load
        failed, or the pool stops."""
        self._room.set()

    async def release(self, entry: ModelEntry) -> None:
        """Unload `entry` now, and say so to a load waiting for room."""
        await entry.unload()
        self._room.set()

    def _shortfall(self, entry: ModelEntry, others: list[ModelEntry]) -> _Limit | None:
        """Which limit loading `entry` beside `others` (resident models) would exceed, or None."""
        settings = self._models.settings
        others = [s for s in others if s is not entry]
        limit, budget = settings.max_loaded_models, settings.memory_budget
        if limit is not None and len(others) + 1 > limit:
            return _Limit(f"max_loaded_models = {limit}", lambda s: 1)
        if budget is not None and sum(s.cost.ram for s in others) + entry.cost.ram > budget:
            return _Limit(f"memory_budget = {budget} bytes", lambda s: s.cost.ram)
        for device, vram in enumerate(settings.gpu_memory_budget or ()):
            if sum(s.cost.on_gpu(device) for s in others) + entry.cost.on_gpu(device) > vram:
                return _Limit(f"gpu_memory_budget[{device}] = {vram} bytes", functools.partial(_on_gpu, device))
        return None

    async def make_room(self, entry: ModelEntry) -> None:
        """Unload least recently used idle, unpinned models until `entry` fits the limits.

        Requests in flight are never cut: a busy model is asked to unload when its requests
        finish, and this waits for that up to `load_wait_seconds`.
        """
        async with self._admission:
            deadline = time.monotonic() + self._models.settings.load_wait_seconds
            while True:
                if not self._models.started:
                    raise ModelNotReady("The model server is stopping.")
                self._room = anyio.Event()
                resident = [s for s in self._models.entries if s.resident and s is not entry]
                short = self._shortfall(entry, resident)
                if short is None:
                    entry.admit()
                    return
                pinned = [s for s in resident if s.pinned]
                limit = self._shortfall(entry, pinned)
                if limit is not None:
                    raise InsufficientMemory(
                        f"The model '{entry.config.id}' (estimated {_cost_text(entry.cost)}) cannot be loaded within "
                        f"{limit.text}, even after unloading every unpinned model."
                    )
                movable = [s for s in resident if not s.pinned and short.held(s) > 0]
                movable.sort(key=lambda s: s.holders.last_used)
                idle = [s for s in movable if s.holders.count == 0 and s.state == "ready"]
                if idle:
                    log.info("unloading model %s to make room for %s", idle[0].config.id, entry.config.id)
                    await self.release(idle[0])
                    continue
                busy = [s for s in movable if s.state == "ready" and not s.holders.unload_pending]
                if busy:  # unloads when its requests finish (Ollama's behaviour too)
                    busy[0].ask_unload()
                left = deadline - time.monotonic()
                try:
                    with anyio.fail_after(max(left, 0)):
                        await self._room.wait()
                except TimeoutError:
                    settings = self._models.settings
                    raise Overloaded(
                        f"The model '{entry.config.id}' waited {settings.load_wait_seconds:g}s for requests on other "
                        f"models to finish; loading it would exceed {short.text}.",
                        retry_after=settings.retry_after_seconds,
                    ) from None


def draft_cost(config: ModelConfig, gpus: int) -> MemoryEstimate:
    """What `config`'s draft model adds: its weights, and a KV cache and compute buffers of as many
    sequences and positions (none where its file is not there: its load fails with its own error)."""
    assert config.draft_model is not None
    alone = {"path": config.draft_model, "lora": (), "mmproj": None, "prompt_cache_mib": 0, "embeddings": False}
    drafting = config.model_copy(update=alone)
    size = file_size(drafting)
    return estimate_memory(drafting, read_facts(config.draft_model), size, gpus=gpus) if size else MemoryEstimate()
