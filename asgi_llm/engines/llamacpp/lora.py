"""A model's LoRA adapters: loaded with the model (`llama_adapter_lora_init`), the scales a request
gets (its own `lora`, else the defaults `/lora-adapters` sets), and the gate that keeps one adapter
setting per decode.

llama.cpp sets adapters on a context, for every sequence in it (`llama_set_adapters_lora`), not per
sequence. So jobs of different settings never share a decode: a job whose setting differs from the
running ones' waits, in FIFO order, until they finish; then the context switches, and each slot's
cache, computed under the old weights, is dropped.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from typing import Any

import llama_cpp

from ...config import ModelConfig
from ...core.errors import InvalidRequest
from ...core.ranking import AdapterScale
from .batching import Slot
from .jobs import Backend, Job
from .prompt_cache import PromptCache

__all__ = ["AdapterDefaults", "AdapterGate", "LoadedAdapters", "LoraAdapterError", "Setting"]

Setting = tuple[float, ...]
"""A scale for each configured adapter, in the configured order (0: off)."""


class LoraAdapterError(ValueError):
    """An adapter file that is not a LoRA of this base model (raised at load, naming the file)."""


class AdapterDefaults:
    """The scales a request that names no adapters gets; set by `POST /lora-adapters`. Kept by the
    engine, so a restart in place keeps them; a model loaded anew starts from its config."""

    def __init__(self, config: ModelConfig) -> None:
        self._model = config.id
        self.ids = tuple(adapter.id for adapter in config.lora)
        self.scales: Setting = tuple(adapter.scale for adapter in config.lora)

    def listing(self) -> tuple[AdapterScale, ...]:
        return tuple(AdapterScale(i, s) for i, s in zip(self.ids, self.scales, strict=True))

    def set_defaults(self, scales: Sequence[AdapterScale]) -> None:
        current = dict(zip(self.ids, self.scales, strict=True))
        current.update(self._named(scales, "lora"))
        self.scales = tuple(current[i] for i in self.ids)  # one assignment: a request reads old or new

    def setting(self, asked: tuple[AdapterScale, ...] | None) -> Setting:
        """A request's setting: the defaults, or exactly the adapters it names (llama-server's
        rule: those it does not name are off)."""
        if asked is None:
            return self.scales
        if not self.ids:
            raise InvalidRequest(f"The model '{self._model}' has no LoRA adapters.", param="lora")
        named = self._named(asked, "lora")
        return tuple(named.get(i, 0.0) for i in self.ids)

    def _named(self, scales: Sequence[AdapterScale], param: str) -> dict[str, float]:
        named = {}
        for i, adapter in enumerate(scales):
            if adapter.id not in self.ids:
                known = ", ".join(self.ids) or "none"
                message = f"Unknown LoRA adapter '{adapter.id}' for the model '{self._model}' (it has: {known})."
                raise InvalidRequest(message, param=f"{param}[{i}].id")
            named[adapter.id] = adapter.scale
        return named


class LoadedAdapters:
    """The adapters' native handles, valid while the model is; llama.cpp frees them with it."""

    def __init__(self, model: Any, config: ModelConfig) -> None:
        self._handles: list[Any] = []
        for adapter in config.lora:
            handle = llama_cpp.llama_adapter_lora_init(model, adapter.path.encode("utf-8"))
            if not handle:
                raise LoraAdapterError(
                    f"model {config.id!r}: the LoRA adapter {adapter.id!r} ({adapter.path}) could not be loaded: "
                    "it is not a LoRA GGUF made for this base model (llama.cpp's log line says why)"
                )
            self._handles.append(handle)

    def apply(self, context: Any, setting: Setting) -> None:
        """Set the adapters of nonzero scale on `context` (a no-op where they are set already)."""
        chosen = [(handle, scale) for handle, scale in zip(self._handles, setting, strict=True) if scale != 0]
        if not chosen:
            llama_cpp.llama_set_adapters_lora(context, None, 0, None)
            return
        handles = (llama_cpp.llama_adapter_lora_p_ctypes * len(chosen))(*(handle for handle, _ in chosen))
        scales = (ctypes.c_float * len(chosen))(*(scale for _, scale in chosen))
        llama_cpp.llama_set_adapters_lora(context, handles, len(chosen), scales)


class AdapterGate:
    """The scheduler's `Gate`: one adapter setting on the context at a time."""

    def __init__(self, backend: Backend, cache: PromptCache | None, apply: Callable[[Setting], None]) -> None:
        self._backend = backend
        self._cache = cache
        self._apply = apply
        self.current: Setting | None = None
        self.switches = 0  # times the setting changed (read by tests)

    def admits(self, job: Job, running: bool, slots: Sequence[Slot]) -> bool:
        if job.setting == self.current:
            return True
        if running:
            return False
        for slot in slots:
            if slot.tokens:
                slot.tokens = []
                self._backend.forget(slot.sequence, 0)
        if self._cache is not None:
            self._cache.clear()
        self._apply(job.setting)
        self.current = job.setting
        self.switches += 1
        return True
