"""The memory estimate of a model before loading: weights from the file, KV cache from the
header's attention shape and the config's context, and budgets written with units."""

from __future__ import annotations

import os

import pytest
from pydantic import ValidationError

from asgi_llm import ModelConfig, Settings
from asgi_llm.config import default_model_path
from asgi_llm.engines.gguf_metadata import read_facts
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
    assert one.total == one.weights + one.kv_cache + one.compute


@pytest.mark.parametrize(
    ("text", "expected"), [("2GiB", 2 * 1024**3), ("512 MB", 512 * 10**6), ("1.5g", 1_500_000_000), ("1000", 1000)]
)
def test_memory_budget_accepts_units(text: str, expected: int) -> None:
    assert Settings(memory_budget=text).memory_budget == expected  # type: ignore[arg-type]


def test_memory_budget_refuses_nonsense() -> None:
    with pytest.raises(ValidationError, match="not a size"):
        Settings(memory_budget="lots")  # type: ignore[arg-type]
