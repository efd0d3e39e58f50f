"""What the pool reads from an engine goes through the `Engine` protocol: load progress for
/health, queued requests for metrics, the memory a loaded model holds for the model lists. Each
engine kind satisfies it, the fake one scriptably."""

from __future__ import annotations

import asyncio

import pytest

from asgi_llm import ModelConfig, ModelPool, Settings
from asgi_llm.core import Engine, MemoryEstimate
from asgi_llm.engines.fake import FakeEngine
from asgi_llm.engines.inference_thread import InferenceThread
from asgi_llm.engines.llamacpp import LlamaCppEngine
from asgi_llm.engines.memory_estimate import MemoryEstimate as Estimate
from asgi_llm.engines.upstream import UpstreamEngine

pytestmark = pytest.mark.anyio

LOCAL = ModelConfig(id="m", path="m.gguf", prompt_cache_mib=0)


def test_every_engine_kind_has_what_the_protocol_declares() -> None:
    remote = ModelConfig(id="r", base_url="http://upstream.invalid/v1")
    engines = [FakeEngine(LOCAL), UpstreamEngine(remote), LlamaCppEngine(LOCAL, InferenceThread())]
    assert all(isinstance(engine, Engine) for engine in engines)
    assert [(e.progress, e.waiting, e.memory) for e in engines] == [(0.0, 0, None)] * 3  # nothing loaded yet


def test_the_estimate_and_the_measure_are_one_type() -> None:
    assert Estimate is MemoryEstimate


async def test_the_pool_reports_what_the_engine_says() -> None:
    made: list[FakeEngine] = []
    gate = asyncio.Event()

    class Loading(FakeEngine):
        async def load(self) -> None:
            self.progress = 0.25
            await gate.wait()
            self.memory = MemoryEstimate(weights=1000, kv_cache=200, gpu=(700,))
            self.waiting = 3

    def factory(config: ModelConfig, thread: object) -> FakeEngine:
        made.append(Loading(config))
        return made[-1]

    p = ModelPool(Settings(models=(LOCAL,)), engine_factory=factory)
    await p.start()
    await asyncio.sleep(0)
    assert p.health()[1]["models"][0]["progress"] == 0.25 and p.queued("m") == 0  # not loaded: nothing queued
    gate.set()
    await p.wait_ready()
    (card,) = p.catalog()
    assert (card.memory, card.memory_vram) == (1200, 700)
    assert p.residency()[0]["actual_memory"] == MemoryEstimate(weights=1000, kv_cache=200, gpu=(700,)).as_dict()
    assert p.queued("m") == 3
    await p.stop()
