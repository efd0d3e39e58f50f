"""What a model holds in memory: estimated before a load, measured after it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["MemoryEstimate"]


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes a loaded model holds: its weights, its KV cache, its compute buffers, and at most
    its prompt cache (set-aside sequence caches, in host memory); `gpu` is how much of that
    total is on each GPU (by device index), the rest (`ram`) in host memory."""

    weights: int = 0
    kv_cache: int = 0
    compute: int = 0
    gpu: tuple[int, ...] = ()
    prompt_cache: int = 0

    @property
    def total(self) -> int:
        return self.weights + self.kv_cache + self.compute + self.prompt_cache

    @property
    def ram(self) -> int:
        return self.total - sum(self.gpu)

    def on_gpu(self, device: int) -> int:
        return self.gpu[device] if device < len(self.gpu) else 0

    def __add__(self, other: MemoryEstimate) -> MemoryEstimate:
        """Both together (a model and its projector), part by part and device by device."""
        return MemoryEstimate(
            weights=self.weights + other.weights,
            kv_cache=self.kv_cache + other.kv_cache,
            compute=self.compute + other.compute,
            gpu=tuple(self.on_gpu(i) + other.on_gpu(i) for i in range(max(len(self.gpu), len(other.gpu)))),
            prompt_cache=self.prompt_cache + other.prompt_cache,
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "weights": self.weights,
            "kv_cache": self.kv_cache,
            "compute": self.compute,
            "prompt_cache": self.prompt_cache,
            "total": self.total,
            "ram": self.ram,
            "gpu": list(self.gpu),
        }
