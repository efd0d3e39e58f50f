"""Residency with the real model: three entries of the packaged GGUF under a limit of two
loaded models, and under a memory budget; a pinned one stays; a model that can never fit is
refused with 507 naming the budget through the OpenAI SDK; operators load and unload;
Ollama's /api/ps lists what is loaded."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import ollama
import openai
import pytest

from asgi_llm import LLMApp, ModelConfig, ModelPool, Settings
from asgi_llm.adapters.ollama import OLLAMA
from asgi_llm.adapters.openai import OPENAI
from asgi_llm.config import default_model_path
from asgi_llm.engines.gguf_metadata import read_facts
from asgi_llm.engines.llamacpp import LlamaCppEngine
from asgi_llm.engines.memory_estimate import estimate_memory

from ..test_http.uvicorn_thread import uvicorn_serving as run_uvicorn

pytestmark = pytest.mark.model


def entry(name: str, **options: object) -> ModelConfig:
    settings: dict[str, object] = {"n_ctx": 256, "parallel": 1, "n_threads": 1, "load": "lazy", **options}
    return ModelConfig(id=name, **settings)  # type: ignore[arg-type]


def cost(config: ModelConfig) -> int:
    path = default_model_path()
    return estimate_memory(config, read_facts(path), os.path.getsize(path)).total


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    # huge by its prompt cache: a KV cache beyond the budget would be refused when the pool starts
    models = (entry("one", pin=True), entry("two"), entry("three"), entry("huge", prompt_cache_mib=2048))
    settings = Settings(models=models, max_loaded_models=2, memory_budget=3 * cost(models[0]))
    llm = LLMApp(pool=ModelPool(settings), adapters=(OPENAI, OLLAMA))
    with run_uvicorn(llm) as address:
        yield address


def ask(url: str, model: str) -> str:
    with openai.OpenAI(base_url=url, api_key="none", max_retries=0, timeout=60) as sdk:
        reply = sdk.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=2)
    return reply.model


def loaded(url: str) -> list[str]:
    return sorted(m["name"].removesuffix(":latest") for m in httpx.get(f"{url}/api/ps").json()["models"])


def test_the_least_recently_used_unpinned_model_unloads_and_the_pin_stays(url: str) -> None:
    assert ask(url, "one") == "one" and ask(url, "two") == "two"
    assert loaded(url) == ["one", "two"]
    assert ask(url, "three") == "three"  # two is evicted, never the pinned one
    assert loaded(url) == ["one", "three"]
    states = {m["id"]: m["state"] for m in httpx.get(f"{url}/admin/models").json()["data"]}
    assert states == {"one": "ready", "two": "unloaded", "three": "ready", "huge": "unloaded"}


def test_a_model_beyond_the_memory_budget_is_refused_with_507_naming_it(url: str) -> None:
    with pytest.raises(openai.InternalServerError) as refused:
        ask(url, "huge")
    assert refused.value.status_code == 507
    message = refused.value.body["message"]  # type: ignore[index]
    assert "memory_budget" in message and "huge" in message and ".gguf" not in message
    assert "one" in loaded(url)  # nothing pinned was touched, the server serves on
    assert ask(url, "one") == "one"


def test_an_operator_unloads_and_loads_over_http(url: str) -> None:
    ask(url, "three")
    assert httpx.post(f"{url}/models/unload", json={"model": "three"}).json() == {"success": True}
    assert "three" not in loaded(url)
    assert httpx.post(f"{url}/models/load", json={"model": "two"}, timeout=60).status_code == 200
    assert loaded(url) == ["one", "two"]


def test_models_dir_serves_each_gguf_by_stem_on_first_use(tmp_path: Path) -> None:
    for stem in ("tiny-a", "tiny-b"):
        (tmp_path / f"{stem}.gguf").symlink_to(default_model_path())
    override = ModelConfig(id="tiny-b", n_ctx=512, parallel=1, n_threads=1)
    settings = Settings(models=(override,), models_dir=str(tmp_path), max_loaded_models=1)
    llm = LLMApp(pool=ModelPool(settings), adapters=(OPENAI, OLLAMA))
    with run_uvicorn(llm) as address:
        listed = httpx.get(f"{address}/models").json()["data"]
        assert sorted(m["id"] for m in listed) == ["tiny-a", "tiny-b"] and loaded(address) == []
        assert ask(address, "tiny-b") == "tiny-b"
        health = httpx.get(f"{address}/health").json()
        assert {m["id"]: m["state"] for m in health["models"]} == {"tiny-b": "ready", "tiny-a": "unloaded"}
        assert health["models"][0]["backend"]["n_ctx"] == 512  # the config entry's override
        assert ask(address, "tiny-a") == "tiny-a" and loaded(address) == ["tiny-a"]


@pytest.mark.anyio
async def test_the_real_engine_reports_its_load_progress() -> None:
    pool = ModelPool(Settings(models=(entry("solo"),)))
    await pool.start()
    try:
        await pool.load("solo")
        engine = pool.loaded("solo")
        assert isinstance(engine, LlamaCppEngine) and engine.progress == 1.0  # llama.cpp's callback reached the end
    finally:
        await pool.stop()


def test_the_admin_list_reports_what_llama_cpp_allocated_beside_the_estimate(url: str) -> None:
    ask(url, "one")
    listed = {m["id"]: m for m in httpx.get(f"{url}/admin/models").json()["data"]}
    one, estimate = listed["one"], estimate_memory(entry("one"), read_facts(default_model_path()), 0)
    actual, size = one["actual_memory"], os.path.getsize(default_model_path())
    assert 0.9 * size < actual["weights"] <= size  # the file's tensor data, without its header
    assert actual["kv_cache"] == pytest.approx(estimate.kv_cache, rel=0.01)  # logged in MiB, two decimals
    assert 0 < actual["compute"] and actual["gpu"] == [] and actual["ram"] == actual["total"]
    assert actual["total"] == actual["weights"] + actual["kv_cache"] + actual["compute"] + actual["prompt_cache"]
    assert listed["huge"]["actual_memory"] is None and one["estimated_memory"]["weights"] == size
    ps = ollama.ProcessResponse.model_validate(httpx.get(f"{url}/api/ps").json())  # the SDK's own type
    # Ollama's size: what the loaded model holds (not its file), and how much of it on GPUs
    running = {m.model: m for m in ps.models}
    assert running["one:latest"].size == actual["total"] and running["one:latest"].size_vram == 0
