"""Startup models beyond the residency limits: the ones that fit load, the rest are left unloaded
at once with a warning that names the limit (they load on first use). They used to wait
`load_wait_seconds` each for room that requests on other models would never make (while the
first still loaded), or, once it had loaded, to unload it: startup models evicting each other."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from asgi_llm import ModelConfig, ModelPool, Settings
from asgi_llm.engines.fake import FakeEngine

pytestmark = pytest.mark.anyio

FAKE_COST = 16 * 1024 * 1024  # a fake model's estimate: the compute floor (no file, no prompt cache)


def startup(*ids: str) -> tuple[ModelConfig, ...]:
    return tuple(ModelConfig(id=i, path=f"{i}.gguf", prompt_cache_mib=0) for i in ids)


class _Loading(FakeEngine):
    async def load(self) -> None:
        await asyncio.sleep(0.05)  # as a real load, it takes a while: the next startup model comes meanwhile


def pool(models: tuple[ModelConfig, ...], **settings: object) -> tuple[ModelPool, list[FakeEngine]]:
    made: list[FakeEngine] = []

    def factory(config: ModelConfig, thread: object) -> FakeEngine:
        made.append(_Loading(config))
        return made[-1]

    return ModelPool(Settings(models=models, **settings), engine_factory=factory), made  # type: ignore[arg-type]


def states(p: ModelPool) -> dict[str, str]:
    return {card.id: card.state for card in p.catalog()}


def skipped(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "asgi_llm.pool" and r.levelno == logging.WARNING]


async def test_startup_models_beyond_max_loaded_models_are_left_unloaded_at_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="asgi_llm.pool")
    p, made = pool(startup("a", "b", "c"), max_loaded_models=1, load_wait_seconds=30)
    began = time.monotonic()
    await p.start()
    await asyncio.wait_for(p.wait_ready(), timeout=5)  # the old pool waited 30 s for each of b and c
    assert time.monotonic() - began < 1
    assert states(p) == {"a": "ready", "b": "unloaded", "c": "unloaded"} and len(made) == 1
    assert p.health()[0] == 200
    reason = "loading it beside a would exceed max_loaded_models = 1 (it loads on first use)"
    assert skipped(caplog) == [f"model {name} left unloaded at startup: {reason}" for name in ("b", "c")]
    async with p.use("c"):  # on first use, within the limit: a unloads
        assert states(p) == {"a": "unloaded", "b": "unloaded", "c": "ready"}
    await p.stop()


async def test_startup_models_beyond_the_memory_budget_together_are_left_unloaded(
    caplog: pytest.LogCaptureFixture,
) -> None:
    p, _ = pool(startup("a", "b", "c"), memory_budget=2 * FAKE_COST + 1024, load_wait_seconds=30)
    await p.start()
    await asyncio.wait_for(p.wait_ready(), timeout=5)
    assert states(p) == {"a": "ready", "b": "ready", "c": "unloaded"}
    (message,) = skipped(caplog)
    assert message.startswith("model c left unloaded at startup: loading it beside a, b would exceed memory_budget = ")
    await p.stop()


async def test_a_startup_model_too_big_alone_says_so(caplog: pytest.LogCaptureFixture) -> None:
    p, made = pool(startup("a"), memory_budget=FAKE_COST - 1)
    await p.start()
    await asyncio.wait_for(p.wait_ready(), timeout=5)
    assert states(p) == {"a": "unloaded"} and made == []
    assert skipped(caplog) == [
        (
            f"model a left unloaded at startup: loading it alone would exceed memory_budget = {FAKE_COST - 1} bytes "
            "(it loads on first use)"
        )
    ]
    await p.stop()


async def test_a_reload_adding_startup_models_beyond_the_limit_loads_those_that_fit(
    caplog: pytest.LogCaptureFixture,
) -> None:
    lazy = ModelConfig(id="x", path="x.gguf", load="lazy", prompt_cache_mib=0)
    p, _ = pool((lazy,), max_loaded_models=2, load_wait_seconds=30)
    await p.start()
    async with p.use("x"):
        pass
    began = time.monotonic()
    await p.reload(Settings(models=(lazy, *startup("a", "b")), max_loaded_models=2, load_wait_seconds=30))
    await asyncio.wait_for(p.wait_ready(), timeout=5)
    assert time.monotonic() - began < 1
    assert states(p) == {"x": "ready", "a": "ready", "b": "unloaded"}  # x stays: startup loads evict nothing
    assert skipped(caplog) == [
        (
            "model b left unloaded at startup: loading it beside x, a would exceed max_loaded_models = 2 "
            "(it loads on first use)"
        )
    ]
    await p.stop()


async def test_an_upstream_startup_model_holds_no_room_and_always_loads(caplog: pytest.LogCaptureFixture) -> None:
    remote = ModelConfig(id="r", base_url="http://upstream.invalid/v1")
    p, made = pool((*startup("a"), remote), max_loaded_models=1)
    await p.start()
    await asyncio.wait_for(p.wait_ready(), timeout=5)
    assert states(p) == {"a": "ready", "r": "ready"} and len(made) == 2 and skipped(caplog) == []
    await p.stop()
