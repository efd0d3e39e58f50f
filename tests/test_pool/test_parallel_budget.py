"""How many sequences a model may decode together: up to llama.cpp's own limit, and with memory
budgets as many as their KV cache fits. A configuration whose KV cache alone exceeds a budget is
refused, with the figures, when the pool reads its GGUF header: at start (so `asgi-llm serve`
and a host's lifespan fail to start) and on reload (the previous settings serve on). The
packaged GGUF gives the header; the engine is fake."""

from __future__ import annotations

import os
from typing import Any

import pytest
from pydantic import ValidationError

from asgi_llm import LLMApp, ModelConfig, ModelPool, Settings
from asgi_llm.config import default_model_path
from asgi_llm.config.model import LLAMA_MAX_SEQ
from asgi_llm.engines.fake import FakeEngine
from asgi_llm.engines.gguf_metadata import read_facts
from asgi_llm.engines.memory_estimate import estimate_memory

pytestmark = pytest.mark.anyio

GIB = 1024**3


def model(**options: Any) -> ModelConfig:
    return ModelConfig(**{"id": "m", "path": default_model_path(), "load": "lazy", "n_ctx": 256, **options})


def kv_bytes(config: ModelConfig) -> int:
    path = default_model_path()
    return estimate_memory(config, read_facts(path), os.path.getsize(path)).kv_cache


def fake_pool(settings: Settings) -> ModelPool:
    return ModelPool(settings, engine_factory=lambda config, thread: FakeEngine(config))


def test_llama_cpp_bounds_parallel_and_the_refusal_names_its_limit() -> None:
    assert LLAMA_MAX_SEQ == 256  # src/llama-cparams.h; the installed build refuses a context of 257
    assert ModelConfig(parallel=128).parallel == 128
    assert ModelConfig(parallel=LLAMA_MAX_SEQ).parallel == LLAMA_MAX_SEQ
    with pytest.raises(
        ValidationError, match=r"parallel = 257 is more sequences than llama.cpp's limit of 256"
    ) as refused:
        ModelConfig(parallel=257)
    assert "LLAMA_MAX_SEQ" in str(refused.value)
    with pytest.raises(ValidationError, match="llama.cpp's limit of 256"):
        Settings.from_env({"ASGI_LLM_PARALLEL": "512"})
    with pytest.raises(ValidationError):
        ModelConfig(parallel=0)


async def test_parallel_128_within_the_memory_budget_starts_and_counts_its_kv_cache() -> None:
    config = model(parallel=128)
    kv = kv_bytes(config)
    assert kv == 128 * 256 * 30 * 3 * (64 + 64) * 2  # positions × layers × KV heads × (K + V widths) × f16
    pool = fake_pool(Settings(models=(config,), memory_budget=kv + GIB))
    await pool.start()
    try:
        assert pool.started
        [described] = pool.residency()
        assert described["estimated_memory"]["kv_cache"] == kv
        async with pool.use("m") as (engine, _):
            assert engine.config.parallel == 128  # type: ignore[attr-defined]
    finally:
        await pool.stop()


async def test_a_kv_cache_beyond_the_memory_budget_is_refused_at_start_with_the_figures() -> None:
    config = model(parallel=256, n_ctx=4096)
    kv = kv_bytes(config)
    budget = 8 * GIB
    assert kv > budget  # 24 GiB of f16 KV cache for 256 sequences of 4096 positions
    pool = fake_pool(Settings(models=(config,), memory_budget="8GiB"))  # type: ignore[arg-type]
    with pytest.raises(ValueError) as refused:
        await pool.start()
    message = str(refused.value)
    assert f"model 'm': its KV cache (parallel = 256 sequences of 4096 positions) needs {kv} bytes" in message
    assert f"({kv / GIB:.2f} GiB) of RAM, more than memory_budget = {budget} bytes (8.00 GiB)" in message
    assert "lower parallel or n_ctx" in message
    assert not pool.started and not pool.thread.alive
    quantized = config.model_copy(update={"type_k": "q4_0", "type_v": "q4_0"})  # about 3.6 times smaller
    pool = fake_pool(Settings(models=(quantized,), memory_budget="8GiB"))  # type: ignore[arg-type]
    await pool.start()
    assert pool.started
    await pool.stop()


async def test_a_kv_cache_beyond_a_gpus_budget_is_refused_and_one_kept_in_ram_counts_there() -> None:
    offloaded = model(parallel=64, n_ctx=2048, n_gpu_layers=-1, split_mode="none", main_gpu=1)
    kv = kv_bytes(offloaded)  # 2.8 GiB, all on GPU 1
    with pytest.raises(ValueError) as refused:
        await fake_pool(Settings(models=(offloaded,), gpu_memory_budget=["24GiB", "2GiB"])).start()  # type: ignore[list-item]
    assert f"needs {kv} bytes ({kv / GIB:.2f} GiB) of GPU 1, more than gpu_memory_budget[1] = {2 * GIB} bytes" in str(
        refused.value
    )
    in_ram = offloaded.model_copy(update={"offload_kqv": False})
    pool = fake_pool(Settings(models=(in_ram,), gpu_memory_budget=["24GiB", "2GiB"]))  # type: ignore[list-item]
    await pool.start()  # the GPU holds none of it now
    await pool.stop()
    with pytest.raises(ValueError, match=f"needs {kv} bytes .* of RAM, more than memory_budget = {2 * GIB} bytes"):
        await fake_pool(Settings(models=(in_ram,), gpu_memory_budget=["24GiB", "2GiB"], memory_budget=2 * GIB)).start()  # type: ignore[list-item]


async def test_without_budgets_nothing_is_refused_and_other_models_are_not_read() -> None:
    pool = fake_pool(Settings(models=(model(parallel=256, n_ctx=8192),)))
    await pool.start()  # no budget: llama.cpp itself says whether it fits
    await pool.stop()
    missing = ModelConfig(id="gone", path="/nowhere/gone.gguf", load="lazy", parallel=256, n_ctx=8192)
    pool = fake_pool(Settings(models=(missing,), memory_budget=GIB))  # no header to read: its load will say so
    await pool.start()
    await pool.stop()


async def test_a_reload_whose_kv_cache_exceeds_the_budget_is_refused_and_the_old_settings_serve_on() -> None:
    fits = Settings(models=(model(parallel=8),), memory_budget=GIB)
    pool = fake_pool(fits)
    await pool.start()
    try:
        too_big = Settings(models=(model(parallel=256, n_ctx=1024),), memory_budget=GIB)
        with pytest.raises(ValueError, match=r"parallel = 256 sequences of 1024 positions\) needs \d+ bytes"):
            await pool.reload(too_big)
        assert pool.settings.models[0].parallel == 8
        await pool.reload()  # the configured settings are still the old ones
        async with pool.use("m") as (engine, _):
            assert engine.config.parallel == 8  # type: ignore[attr-defined]
    finally:
        await pool.stop()


async def test_a_host_lifespan_fails_to_start_naming_the_figures() -> None:
    config = model(parallel=200, n_ctx=8192)
    app = LLMApp(pool=fake_pool(Settings(models=(config,), memory_budget="16GiB")))  # type: ignore[arg-type]
    sent: list[dict[str, Any]] = []
    incoming = [{"type": "lifespan.startup"}]

    async def receive() -> dict[str, Any]:
        return incoming.pop(0)

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app({"type": "lifespan", "asgi": {"version": "3.0"}}, receive, send)  # type: ignore[arg-type]
    assert [m["type"] for m in sent] == ["lifespan.startup.failed"]
    assert (
        f"needs {kv_bytes(config)} bytes" in sent[0]["message"]
        and "memory_budget = 17179869184 bytes" in sent[0]["message"]
    )
