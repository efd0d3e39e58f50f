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

from ..config import ModelConfig, Settings
from ..core.catalog import ModelFacts
from ..core.memory import MemoryEstimate  # the estimate's type, which engines also report once loaded

__all__ = ["MemoryEstimate", "device_shares", "estimate_memory", "kv_refusal", "prompt_cache_bytes"]

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


def estimate_memory(
    config: ModelConfig, facts: ModelFacts, file_size: int, *, gpus: int = 1, adapters: int = 0, projector: int = 0
) -> MemoryEstimate:
    """The cost of loading `config`'s model, whose header said `facts` and whose file has
    `file_size` bytes, with LoRA adapter files of `adapters` bytes in all and a vision projector
    (`mmproj`) of `projector` bytes, on a machine with `gpus` GPUs (the number the budget names).
    llama.cpp keeps each adapter tensor where its base layer lives, so adapters go to the GPUs in
    the share the offloaded layers have; the projector goes whole to the main GPU once any layer
    is offloaded (as its load is told to), else stays in RAM."""
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
    if adapters and layers > 0:
        offloaded_layers = layers if config.n_gpu_layers == -1 else min(max(config.n_gpu_layers, 0), layers)
        weights_on_gpus += adapters * offloaded_layers / layers
    if projector and config.n_gpu_layers != 0:
        weights_on_gpus += projector
    on_gpus = weights_on_gpus + kv_cache * kv_share + (compute if weights_on_gpus else 0)
    gpu = tuple(int(on_gpus * share) for share in device_shares(config, gpus)) if on_gpus else ()
    return MemoryEstimate(
        weights=file_size + adapters + projector + copied,
        kv_cache=kv_cache,
        compute=compute,
        gpu=gpu,
        prompt_cache=prompt_cache_bytes(config),
    )


def kv_refusal(config: ModelConfig, facts: ModelFacts, settings: Settings) -> str | None:
    """Why `config`'s KV cache alone can never fit `settings`' budgets, with the figures, or None.
    The KV cache grows with `parallel` × `n_ctx`: such a configuration is refused when it is read,
    where a model whose weights make it too big is refused (507) only when asked to load."""
    gpus = len(settings.gpu_memory_budget or ()) or 1
    kv_cache = estimate_memory(config, facts, 0, gpus=gpus).kv_cache
    layers = _int(facts.metadata, f"{facts.architecture}.block_count")
    share = _offloaded(config, facts, 0, layers)[2]
    on_gpus = [int(kv_cache * share * part) for part in device_shares(config, gpus)] if share else []
    places = [("memory_budget", settings.memory_budget, kv_cache - sum(on_gpus), "RAM")]
    places += [
        (f"gpu_memory_budget[{device}]", budget, on_gpus[device] if device < len(on_gpus) else 0, f"GPU {device}")
        for device, budget in enumerate(settings.gpu_memory_budget or ())
    ]
    for name, budget, held, where in places:
        if budget is not None and held > budget:
            per_sequence = config.n_ctx or _int(facts.metadata, f"{facts.architecture}.context_length", 4096)
            return (
                f"model {config.id!r}: its KV cache (parallel = {config.parallel} sequences of {per_sequence} positions"
                f"{' and an embedding context' if config.embeddings else ''}) needs {held} bytes ({_gib(held)}) of "
                f"{where}, more than {name} = {budget} bytes ({_gib(budget)}); lower parallel or n_ctx, or store the "
                "cache in fewer bits (type_k, type_v)"
            )
    return None


def _gib(size: int) -> str:
    return f"{size / 1024**3:.2f} GiB"


def prompt_cache_bytes(config: ModelConfig) -> int:
    return config.prompt_cache_mib * 1024 * 1024
