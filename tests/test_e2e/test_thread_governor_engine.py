"""The real engine on two threads gives one up while another process keeps one of its cores busy,
and takes it back once that process has gone."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from asgi_llm import ModelConfig
from asgi_llm.config import usable_cores
from asgi_llm.core import ChatRequest, Message, SamplingParams
from asgi_llm.engines.llamacpp import LlamaCppEngine

from .local_engine import local_engine

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.model,
    pytest.mark.skipif(usable_cores() < 2 or not hasattr(os, "sched_setaffinity"), reason="needs two cores"),
]
KEEP_TALKING = ((0, -100.0), (2, -100.0))
ROUNDS = 40  # requests of 32 tokens: about 10 s of decoding at the slowest


def talk() -> ChatRequest:
    params = SamplingParams(max_tokens=32, temperature=0, logit_bias=KEEP_TALKING)
    return ChatRequest(model="m", messages=(Message("user", "Tell me about the sea."),), sampling=params)


async def threads_after_talking(engine: LlamaCppEngine, until: int) -> list[int]:
    """Thread counts after each request, until `until` is reached or the rounds run out."""
    seen = []
    for _ in range(ROUNDS):
        async for _event in engine.generate(talk()):
            pass
        seen.append(engine.describe()["threads_now"])
        if seen[-1] == until:
            break
    return seen


@pytest.fixture
def busy_core() -> Iterator[subprocess.Popen[bytes]]:
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    os.sched_setaffinity(hog.pid, {max(os.sched_getaffinity(0))})
    yield hog
    hog.kill()
    hog.wait()


async def test_threads_follow_a_busy_core(busy_core: subprocess.Popen[bytes]) -> None:
    async with local_engine(ModelConfig(n_ctx=512, parallel=1, n_threads=2)) as engine:
        assert engine.describe()["threads_now"] == 2
        crowded = await threads_after_talking(engine, until=1)
        assert crowded[-1] == 1, f"still on {crowded[-1]} threads with a core busy: {crowded}"
        busy_core.kill()
        busy_core.wait()
        freed = await threads_after_talking(engine, until=2)
        assert freed[-1] == 2, f"not back to 2 threads once the core was free: {freed}"


async def test_adapt_threads_off_keeps_the_configured_count(busy_core: subprocess.Popen[bytes]) -> None:
    config = ModelConfig(n_ctx=512, parallel=1, n_threads=2, adapt_threads=False)
    async with local_engine(config) as engine:
        for _ in range(4):  # some 3 s of decoding: six windows where the governor would have acted
            async for _event in engine.generate(talk()):
                pass
            assert engine.describe()["threads_now"] == 2
