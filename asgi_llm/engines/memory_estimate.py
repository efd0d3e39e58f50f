"""A model's memory cost, estimated from its GGUF header and its config before it is loaded.

The pool admits a load only when the estimate fits the residency budget, so the estimate must
exist without `llama_cpp` and without reading weights: weights are the file's tensor data
(its size), the KV cache follows from the context the config asks for and the attention shape
the header states, and compute buffers from the batch size.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..config import ModelConfig
from ..core.catalog import ModelFacts

__all__ = ["MemoryEstimate", "estimate_memory"]

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
    """Bytes a loaded model holds: its weights, its KV cache, its compute buffers."""

    weights: int = 0
    kv_cache: int = 0
    compute: int = 0

    @property
    def total(self) -> int:
        return self.weights + self.kv_cache + self.compute

    def as_dict(self) -> dict[str, int]:
        return {"weights": self.weights, "kv_cache": self.kv_cache, "compute": self.compute, "total": self.total}


def _int(metadata: Mapping[str, str | int | float | bool], key: str, default: int = 0) -> int:
    value = metadata.get(key)
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default


def estimate_memory(config: ModelConfig, facts: ModelFacts, file_size: int) -> MemoryEstimate:
    """The cost of loading `config`'s model, whose header said `facts` and whose file has `file_size` bytes."""
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
    return MemoryEstimate(weights=file_size, kv_cache=int(positions * per_position), compute=compute)
