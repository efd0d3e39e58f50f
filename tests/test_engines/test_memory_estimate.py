"""The memory estimate of a model before loading: weights from the file, KV cache from the
header's attention shape and the config's context, and budgets written with units."""

from __future__ import annotations

import dataclasses
import os

import pytest
from pydantic import ValidationError

from asgi_llm import ModelConfig, Settings
from asgi_llm.config import default_model_path
from asgi_llm.engines.gguf_metadata import read_facts
from asgi_llm.engines.llamacpp.buffers import measured_memory
from asgi_llm.engines.memory_estimate import estimate_memory


def test_the_packaged_model_estimate_follows_its_header_and_config() -> None:
    path = default_model_path()
    facts, size = read_facts(path), os.path.getsize(path)
    one = estimate_memory(ModelConfig(n_ctx=1024, parallel=1), facts, size)
    # SmolLM2-135M: 30 layers, 3 KV heads of 64 dims, f16 keys and values
    assert one.weights == size and one.kv_cache == 1024 * 30 * 3 * (64 * 2 + 64 * 2)
    four = estimate_memory(ModelConfig(n_ctx=1024, parallel=4), facts, size)
    assert four.kv_cache == 4 * one.kv_cache
    quantized = estimate_memory(ModelConfig(n_ctx=1024, parallel=1, type_k="q8_0", type_v="q8_0"), facts, size)
    assert quantized.kv_cache < one.kv_cache
    training = estimate_memory(ModelConfig(n_ctx=0, parallel=1), facts, size)
    assert training.kv_cache == 8 * one.kv_cache  # its training context is 8192
    assert one.total == one.weights + one.kv_cache + one.compute + one.prompt_cache
    assert one.prompt_cache == 256 * 1024 * 1024 and one.ram == one.total  # the default budget, in host memory


@pytest.mark.parametrize(
    ("text", "expected"), [("2GiB", 2 * 1024**3), ("512 MB", 512 * 10**6), ("1.5g", 1_500_000_000), ("1000", 1000)]
)
def test_memory_budget_accepts_units(text: str, expected: int) -> None:
    assert Settings(memory_budget=text).memory_budget == expected  # type: ignore[arg-type]


def test_memory_budget_refuses_nonsense() -> None:
    with pytest.raises(ValidationError, match="not a size"):
        Settings(memory_budget="lots")  # type: ignore[arg-type]


def _packaged(**options: object):  # type: ignore[no-untyped-def]
    path = default_model_path()
    return read_facts(path), os.path.getsize(path), ModelConfig(n_ctx=1024, parallel=1, **options)  # type: ignore[arg-type]


def test_offloaded_layers_count_on_the_gpu_and_the_rest_in_ram() -> None:
    facts, size, cpu_config = _packaged()
    layer = facts.layer_weights[0]  # 30 equal layers, and tied embeddings (no output.weight)
    assert len(facts.layer_weights) == 30 and set(facts.layer_weights) == {layer} and facts.output_copy > 0
    cpu = estimate_memory(cpu_config, facts, size)
    assert cpu.gpu == () and cpu.ram == cpu.total and cpu.weights == size
    everything = estimate_memory(_packaged(n_gpu_layers=-1)[2], facts, size)
    # the token embeddings (and the header) stay in RAM; the output layer copies them to the GPU
    assert everything.weights == size + facts.output_copy
    assert everything.ram == size - 30 * layer - facts.output_weights + everything.prompt_cache
    assert everything.gpu == (everything.total - everything.ram,)
    # the last 15 of 30 layers, their half of the KV cache, the compute buffer; no output layer yet
    half = estimate_memory(_packaged(n_gpu_layers=15)[2], facts, size)
    assert half.on_gpu(0) == 15 * layer + half.kv_cache // 2 + half.compute and half.weights == size
    kv_at_home = estimate_memory(_packaged(n_gpu_layers=-1, offload_kqv=False)[2], facts, size)
    assert kv_at_home.ram == everything.ram + kv_at_home.kv_cache


def test_without_the_tensor_table_the_gpu_share_follows_the_layer_count() -> None:
    facts, size, _ = _packaged()
    bare = dataclasses.replace(facts, layer_weights=(), output_weights=0, output_copy=0)
    half = estimate_memory(_packaged(n_gpu_layers=15)[2], bare, size)
    assert abs(half.on_gpu(0) - (size * 15 / 31 + half.kv_cache / 2 + half.compute)) <= 1


def test_the_gpu_share_splits_across_devices_as_llama_cpp_splits_layers() -> None:
    facts, size, _ = _packaged()
    whole = estimate_memory(_packaged(n_gpu_layers=-1)[2], facts, size).on_gpu(0)
    even = estimate_memory(_packaged(n_gpu_layers=-1)[2], facts, size, gpus=2)
    assert even.gpu == (whole // 2, whole // 2)
    three_to_one = estimate_memory(_packaged(n_gpu_layers=-1, tensor_split=(3.0, 1.0))[2], facts, size, gpus=2)
    assert three_to_one.gpu == (int(whole * 0.75), int(whole * 0.25))
    second_only = estimate_memory(_packaged(n_gpu_layers=-1, split_mode="none", main_gpu=1)[2], facts, size, gpus=2)
    assert second_only.gpu == (0, whole) and second_only.on_gpu(5) == 0


def test_gpu_memory_budget_takes_one_size_per_gpu_and_each_model_must_fit_its_devices() -> None:
    assert Settings(gpu_memory_budget=["24GiB", 1000]).gpu_memory_budget == (24 * 1024**3, 1000)  # type: ignore[arg-type]
    assert Settings(gpu_memory_budget="8GiB,8GiB").gpu_memory_budget == (8 * 1024**3,) * 2  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="one positive size per GPU"):
        Settings(gpu_memory_budget=[])
    with pytest.raises(ValidationError, match="'big' uses a GPU that gpu_memory_budget has no entry for"):
        Settings(
            models=(ModelConfig(id="big", n_gpu_layers=-1, main_gpu=1, split_mode="none"),), gpu_memory_budget=["8GiB"]
        )
    Settings(models=(ModelConfig(id="cpu", main_gpu=3),), gpu_memory_budget=["8GiB"])  # nothing offloaded: fine


LOAD_LOG = [
    "load_tensors: loading model tensors, this can take a while... (mmap = true)",
    "load_tensors:   CPU_Mapped model buffer size =    10.50 MiB",
    "load_tensors:        CUDA0 model buffer size =   100.00 MiB",
    "load_tensors:        CUDA1 model buffer size =    50.00 MiB",
    "llama_context:  CUDA_Host  output buffer size =     0.25 MiB",
    "llama_kv_cache:      CUDA0 KV buffer size =    12.00 MiB",
    "llama_kv_cache:      CUDA1 KV buffer size =     6.00 MiB",
    "llama_context:      CUDA0 compute buffer size =    20.00 MiB",
    "llama_context:  CUDA_Host compute buffer size =     4.00 MiB",
    "llama_context: graph nodes  = 1000",
]


def test_the_load_log_gives_what_llama_cpp_allocated_per_kind_and_device() -> None:
    memory = measured_memory(LOAD_LOG)
    assert memory is not None
    mib = 1024 * 1024
    assert (memory.weights, memory.kv_cache, memory.compute) == (int(160.5 * mib), 18 * mib, int(24.25 * mib))
    assert memory.gpu == (132 * mib, 56 * mib)
    assert memory.ram == int(10.5 * mib + 0.25 * mib + 4 * mib)
    assert measured_memory(["llama_context: n_ctx = 1024"]) is None


def test_lora_adapters_count_with_the_weights_on_the_devices_of_their_layers() -> None:
    facts, size, cpu_config = _packaged()
    adapters = 3 * 2**20
    base, with_adapters = (
        estimate_memory(cpu_config, facts, size),
        estimate_memory(cpu_config, facts, size, adapters=adapters),
    )
    assert with_adapters.weights == base.weights + adapters and with_adapters.ram == base.ram + adapters
    half_config = _packaged(n_gpu_layers=15)[2]
    half, half_adapters = (
        estimate_memory(half_config, facts, size),
        estimate_memory(half_config, facts, size, adapters=adapters),
    )
    assert half_adapters.on_gpu(0) == half.on_gpu(0) + adapters // 2  # 15 of 30 layers offloaded
    assert half_adapters.ram == half.ram + adapters - adapters // 2


def test_a_projector_counts_with_the_weights_on_the_main_gpu_once_layers_offload() -> None:
    facts, size, cpu_config = _packaged()
    projector = 5 * 2**20
    base, seeing = (
        estimate_memory(cpu_config, facts, size),
        estimate_memory(cpu_config, facts, size, projector=projector),
    )
    assert seeing.weights == base.weights + projector and seeing.ram == base.ram + projector
    gpu_config = _packaged(n_gpu_layers=15)[2]
    offloaded = estimate_memory(gpu_config, facts, size)
    offloaded_seeing = estimate_memory(gpu_config, facts, size, projector=projector)
    assert offloaded_seeing.on_gpu(0) == offloaded.on_gpu(0) + projector and offloaded_seeing.ram == offloaded.ram


def test_the_pool_estimate_reads_the_adapter_files(tmp_path: os.PathLike[str]) -> None:
    from asgi_llm.pool.entry import adapters_size

    first, second = os.path.join(tmp_path, "a.gguf"), os.path.join(tmp_path, "b.gguf")
    with open(first, "wb") as out:
        out.write(b"x" * 1000)
    with open(second, "wb") as out:
        out.write(b"x" * 24)
    config = ModelConfig(lora=[{"id": "a", "path": first}, {"id": "b", "path": second, "scale": 0.5}])
    assert adapters_size(config) == 1024
    assert adapters_size(ModelConfig()) == 0
