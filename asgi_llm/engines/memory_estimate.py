"""A model's memory cost, estimated from its GGUF header and its config before it is loaded.

The pool admits a load only when the estimate fits the residency budget, so the estimate must
exist without `llama_cpp` and without reading weights: weights are the file's tensor data
(its size; per layer, the tensor table's), the KV cache follows from the context the config asks for and the attention shape
the header states, and compute buffers from the batch size. With layers offloaded, their share
of the weights and KV cache (and the compute buffer) is counted on the GPUs instead of in RAM,
split across devices the way llama.cpp splits them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..config import ModelConfig
from ..core.catalog import ModelFacts

__all__ = ["MemoryEstimate", "device_shares", "estimate_memory", "prompt_cache_bytes"]

_KV_BYTES = {
    "f32": 4.0,
    "f16": 2.0,
    "bf16": 2.0,
    "q8_0": 34 / 32,
    "q4_0": 18 / 32,
    "q4_1": 20 / 32,
    "iq4_nl": 18 / 32,
    "q5_0": 22 / 32,
    "q5_1": 24 / 32,
}
_COMPUTE_FLOOR = 16 * 1024 * 1024


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


def _int(metadata: Mapping[str, str | int | float | bool], key: str, default: int = 0) -> int:
    value = metadata.get(key)
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default


def device_shares(config: ModelConfig, gpus: int) -> list[float]:
    """The fraction of the offloaded layers each GPU holds: all on `main_gpu` without splitting,
    else `tensor_split`'s proportions, else (llama.cpp splits by free memory, unknown here) even."""
    if config.split_mode == "none" or (gpus <= 1 and not config.tensor_split):
        return [0.0] * config.main_gpu + [1.0]
    if config.tensor_split and sum(config.tensor_split) > 0:
        whole = sum(config.tensor_split)
        return [part / whole for part in config.tensor_split]
    return [1.0 / gpus] * gpus


def _offloaded(config: ModelConfig, facts: ModelFacts, file_size: int, layers: int) -> tuple[float, int, float]:
    """What offloading puts on GPUs: bytes of weights (of which the second figure are a copy
    that also stays in RAM: a tied output matrix) and the share of the KV cache. llama.cpp
    offloads the last `n_gpu_layers` repeating layers, and the output layer once `n_gpu_layers`
    exceeds them; their sizes come from the tensor table, else in proportion to the file."""
    wanted = layers + 1 if config.n_gpu_layers == -1 else min(config.n_gpu_layers, layers + 1)
    if wanted <= 0 or layers <= 0:
        return 0.0, 0, 0.0
    repeating, output = min(wanted, layers), wanted > layers
    kv = repeating / layers if config.offload_kqv else 0.0
    if len(facts.layer_weights) != layers:
        return file_size * wanted / (layers + 1), 0, kv
    copied = facts.output_copy if output else 0
    moved = sum(facts.layer_weights[layers - repeating :]) + (facts.output_weights if output else 0)
    return float(moved + copied), copied, kv


def estimate_memory(config: ModelConfig, facts: ModelFacts, file_size: int, *, gpus: int = 1) -> MemoryEstimate:
    """The cost of loading `config`'s model, whose header said `facts` and whose file has
    `file_size` bytes, on a machine with `gpus` GPUs (the number the budget names)."""
    meta = facts.metadata
    arch = facts.architecture
    layers = _int(meta, f"{arch}.block_count")
    embedding = _int(meta, f"{arch}.embedding_length")
    heads = _int(meta, f"{arch}.attention.head_count", 1) or 1
    kv_heads = _int(meta, f"{arch}.attention.head_count_kv", heads) or heads
    key_length = _int(meta, f"{arch}.attention.key_length", embedding // heads)
    value_length = _int(meta, f"{arch}.attention.value_length", embedding // heads)
    per_sequence = config.n_ctx or _int(meta, f"{arch}.context_length", 4096)
    positions = per_sequence * config.parallel + (per_sequence if config.embeddings else 0)
    per_position = (
        layers
        * kv_heads
        * (key_length * _KV_BYTES[config.type_k or "f16"] + value_length * _KV_BYTES[config.type_v or "f16"])
    )
    vocab = _int(meta, f"{arch}.vocab_size")
    compute = max(_COMPUTE_FLOOR, config.n_ubatch * (embedding * 4 * 8 + vocab * 4))
    kv_cache = int(positions * per_position)
    weights_on_gpus, copied, kv_share = _offloaded(config, facts, file_size, layers)
    on_gpus = weights_on_gpus + kv_cache * kv_share + (compute if weights_on_gpus else 0)
    gpu = tuple(int(on_gpus * share) for share in device_shares(config, gpus)) if on_gpus else ()
    return MemoryEstimate(
        weights=file_size + copied, kv_cache=kv_cache, compute=compute, gpu=gpu, prompt_cache=prompt_cache_bytes(config)
    )


def prompt_cache_bytes(config: ModelConfig) -> int:
    return config.prompt_cache_mib * 1024 * 1024
