"""Residency limits with the fake engine: LRU eviction of idle models, pins, refusals, and the
races of a load, an eviction and requests at once. (A fake model's estimate is its compute floor.)"""

from __future__ import annotations

import asyncio
import os

import pytest

from asgi_llm import ModelConfig, ModelPool, Settings
from asgi_llm.config import default_model_path
from asgi_llm.core import InsufficientMemory, Overloaded
from asgi_llm.engines.fake import FakeEngine
from asgi_llm.engines.gguf_metadata import read_facts
from asgi_llm.engines.memory_estimate import MemoryEstimate, estimate_memory

pytestmark = pytest.mark.anyio

MIB = 1024 * 1024
FAKE_COST = 16 * MIB


def pool(*ids: str, pinned: tuple[str, ...] = (), **settings: object) -> tuple[ModelPool, list[FakeEngine]]:
    made: list[FakeEngine] = []

    def factory(config: ModelConfig, thread: object) -> FakeEngine:
        made.append(FakeEngine(config))
        return made[-1]

    models = tuple(  # no file: the estimate is the compute floor alone, FAKE_COST, with no prompt cache
        ModelConfig(id=i, path=f"{i}.gguf", load="lazy", pin=i in pinned, prompt_cache_mib=0) for i in ids
    )
    return ModelPool(Settings(models=models, **settings), engine_factory=factory), made  # type: ignore[arg-type]


def loaded(p: ModelPool) -> list[str]:
    return sorted(card.id for card in p.catalog() if card.state == "ready")


async def test_max_loaded_models_unloads_the_least_recently_used_idle_model() -> None:
    p, made = pool("a", "b", "c", max_loaded_models=2)
    await p.start()
    for name in ("a", "b", "a", "c"):  # b is now the least recently used
        async with p.use(name):
            pass
    assert loaded(p) == ["a", "c"]
    assert [e.config.id for e in made if e.closed] == ["b"]
    await p.stop()


async def test_memory_budget_counts_estimates_and_the_health_reports_them() -> None:
    p, _ = pool("a", "b", "c", memory_budget=2 * FAKE_COST + MIB)
    await p.start()
    for name in ("a", "b", "c"):
        async with p.use(name):
            pass
    assert loaded(p) == ["b", "c"]
    _, health = p.health()
    assert health["residency"] == {
        "max_loaded_models": None,
        "memory_budget": 2 * FAKE_COST + MIB,
        "loaded_models": 2,
        "estimated_bytes": 2 * FAKE_COST,
    }
    assert health["models"][0]["estimated_memory"]["total"] == FAKE_COST
    await p.stop()


async def test_a_pinned_model_is_never_unloaded_to_make_room() -> None:
    p, _ = pool("a", "b", "c", pinned=("a",), max_loaded_models=2)
    await p.start()
    for name in ("a", "b", "c", "b"):
        async with p.use(name):
            pass
    assert "a" in loaded(p) and len(loaded(p)) == 2
    await p.stop()


async def test_a_model_that_cannot_fit_beside_the_pinned_ones_gets_507_naming_the_budget() -> None:
    p, _ = pool("a", "b", pinned=("a",), memory_budget=FAKE_COST + MIB)
    await p.start()
    async with p.use("a"):
        pass
    with pytest.raises(InsufficientMemory) as refused:
        async with p.use("b"):
            pass
    assert refused.value.status == 507 and f"memory_budget = {FAKE_COST + MIB} bytes" in refused.value.message
    assert loaded(p) == ["a"]
    async with p.use("a"):  # the pool still serves
        pass
    await p.stop()


async def test_a_load_waits_for_the_request_in_flight_and_never_cuts_it() -> None:
    p, made = pool("a", "b", max_loaded_models=1)
    await p.start()
    release = asyncio.Event()
    order: list[str] = []

    async def long_request() -> None:
        async with p.use("a") as (engine, _):
            await release.wait()
            assert not engine.closed  # type: ignore[attr-defined]
            order.append("a done")

    async def request_b() -> None:
        async with p.use("b"):
            order.append("b served")

    first = asyncio.create_task(long_request())
    await asyncio.sleep(0.01)
    second = asyncio.create_task(request_b())
    await asyncio.sleep(0.05)
    assert order == [] and {c.id: c.state for c in p.catalog()} == {"a": "ready", "b": "loading"}
    release.set()
    await asyncio.gather(first, second)
    assert order == ["a done", "b served"] and loaded(p) == ["b"] and made[0].closed
    await p.stop()


async def test_a_load_that_waits_too_long_for_busy_models_gets_503() -> None:
    p, _ = pool("a", "b", max_loaded_models=1, load_wait_seconds=0.05, retry_after_seconds=2)
    await p.start()
    async with p.use("a"):
        with pytest.raises(Overloaded) as refused:
            async with p.use("b"):
                pass
    assert refused.value.status == 503 and "max_loaded_models = 1" in refused.value.message
    await asyncio.sleep(0.01)
    async with p.use("b"):  # once a is idle, b loads in its place
        pass
    assert loaded(p) == ["b"]
    await p.stop()


async def test_many_models_many_concurrent_first_requests_stay_within_the_limit() -> None:
    names = [f"m{i}" for i in range(8)]
    p, made = pool(*names, max_loaded_models=3)
    await p.start()
    peak = 0

    async def request(name: str) -> None:
        nonlocal peak
        async with p.use(name) as (engine, model_id):
            assert model_id == name and not engine.closed  # type: ignore[attr-defined]
            peak = max(peak, len(loaded(p)))
            await asyncio.sleep(0.001)

    await asyncio.gather(*(request(n) for n in names * 4))
    assert peak <= 3 and len(loaded(p)) <= 3
    assert all(e.closed for e in made if e.config.id not in loaded(p))
    await p.stop()


async def test_a_load_an_eviction_and_a_request_for_the_victim_at_once() -> None:
    """b's load evicts idle a while a request for a arrives: a reloads after, nobody is cut."""
    p, made = pool("a", "b", max_loaded_models=1)
    await p.start()
    async with p.use("a"):
        pass
    results = await asyncio.gather(*(_served(p, n) for n in ("b", "a", "b", "a")))
    assert results == ["b", "a", "b", "a"]
    assert len(loaded(p)) == 1 and sum(not e.closed for e in made) == 1
    await p.stop()


async def _served(p: ModelPool, name: str) -> str:
    async with p.use(name) as (engine, model_id):
        assert not engine.closed  # type: ignore[attr-defined]
        await asyncio.sleep(0)
        return model_id


async def test_health_and_the_admin_list_show_a_loading_models_progress() -> None:
    gate = asyncio.Event()

    class Halfway(FakeEngine):
        async def load(self) -> None:
            self.progress = 0.5
            await gate.wait()

    p = ModelPool(Settings(models=(ModelConfig(id="m", path="m.gguf"),)), engine_factory=lambda c, t: Halfway(c))
    await p.start()
    await asyncio.sleep(0)
    status, health = p.health()
    assert status == 503 and health["models"][0] == {"id": "m", "state": "loading", "progress": 0.5}
    assert p.residency()[0]["progress"] == 0.5
    gate.set()
    await p.wait_ready()
    assert "progress" not in p.health()[1]["models"][0] and "progress" not in p.residency()[0]
    await p.stop()


def offloaded(name: str, gpu: int) -> ModelConfig:
    """The packaged GGUF (its header gives the estimate; the engine is fake), whole on one GPU."""
    return ModelConfig(id=name, path=default_model_path(), load="lazy", n_gpu_layers=-1, split_mode="none", main_gpu=gpu)


def cost() -> MemoryEstimate:
    """What one such model costs (on GPU 0)."""
    path = default_model_path()
    return estimate_memory(offloaded("x", 0), read_facts(path), os.path.getsize(path), gpus=2)


def gpu_pool(placement: dict[str, int], **settings: object) -> ModelPool:
    models = tuple(offloaded(name, gpu) for name, gpu in placement.items())
    return ModelPool(Settings(models=models, **settings), engine_factory=lambda c, t: FakeEngine(c))  # type: ignore[arg-type]


async def test_each_gpu_has_its_own_budget_and_only_its_models_make_room_on_it() -> None:
    one, ram = cost().on_gpu(0), cost().ram
    p = gpu_pool({"a": 0, "b": 1, "c": 1}, gpu_memory_budget=[10 * 1024**3, one + MIB], memory_budget=3 * ram)
    await p.start()
    for name in ("a", "b", "c"):  # a is the least recently used, but b is the one on GPU 1
        async with p.use(name):
            pass
    assert loaded(p) == ["a", "c"]
    _, health = p.health()
    assert health["residency"]["gpu_memory_budget"] == [10 * 1024**3, one + MIB]
    assert health["residency"]["estimated_gpu_bytes"] == [one, one]
    assert health["residency"]["estimated_bytes"] == 2 * ram  # what stays in RAM (the token embeddings)
    await p.stop()


async def test_a_model_too_big_for_its_gpu_gets_507_naming_that_gpus_budget() -> None:
    one, ram = cost().on_gpu(0), cost().ram
    p = gpu_pool({"a": 0, "b": 1}, gpu_memory_budget=[10 * 1024**3, one - MIB])  # its KV cache fits, the rest not
    await p.start()
    with pytest.raises(InsufficientMemory) as refused:
        async with p.use("b"):
            pass
    message = refused.value.message
    assert refused.value.status == 507 and f"gpu_memory_budget[1] = {one - MIB} bytes" in message
    assert f"{ram} bytes of RAM, {one} on GPU 1" in message
    async with p.use("a"):
        pass
    assert loaded(p) == ["a"]
    await p.stop()
