"""Idle unloading: a request's keep_alive holds for the idle time after it, a request without one
brings back the model's own policy (as in Ollama); unloaded models reload on use."""

from __future__ import annotations

import asyncio

import pytest

from asgi_llm import ModelConfig, ModelPool, Settings
from asgi_llm.engines.fake import FakeEngine

pytestmark = pytest.mark.anyio


def pool(keep_alive: float | None = None) -> tuple[ModelPool, list[FakeEngine]]:
    made: list[FakeEngine] = []

    def factory(config: ModelConfig, thread: object) -> FakeEngine:
        made.append(FakeEngine(config))
        return made[-1]

    settings = Settings(models=(ModelConfig(id="m", path="x.gguf", keep_alive=keep_alive),))
    return ModelPool(settings, engine_factory=factory), made


def state(p: ModelPool) -> str:
    return p.catalog()[0].state


async def test_keep_alive_zero_unloads_when_the_request_ends_and_next_use_reloads() -> None:
    p, made = pool()
    await p.start()
    await p.wait_ready()
    async with p.use("m", keep_alive=0) as (engine, model_id):
        assert model_id == "m" and state(p) == "ready"
    await asyncio.sleep(0.01)
    assert state(p) == "unloaded" and made[0].closed
    async with p.use("m") as (engine, _):
        assert engine is made[1] and state(p) == "ready"
    await p.stop()


async def test_idle_timer_unloads_and_expires_at_is_reported() -> None:
    p, _ = pool(keep_alive=0.05)
    await p.start()
    await p.wait_ready()
    async with p.use("m"):
        assert p.catalog()[0].expires_at is None  # in use: no timer
    assert p.catalog()[0].expires_at is not None
    await asyncio.sleep(0.15)
    assert state(p) == "unloaded"
    await p.stop()


async def test_negative_keep_alive_keeps_forever() -> None:
    p, _ = pool(keep_alive=0.01)
    await p.start()
    await p.wait_ready()
    async with p.use("m", keep_alive=-1):
        pass
    await asyncio.sleep(0.05)
    assert state(p) == "ready" and p.catalog()[0].expires_at is None
    await p.stop()


async def test_unload_waits_for_running_requests() -> None:
    p, made = pool()
    await p.start()
    await p.wait_ready()
    async with p.use("m"):
        await p.unload("m")
        assert state(p) == "ready" and not made[0].closed
    await asyncio.sleep(0.01)
    assert state(p) == "unloaded" and made[0].closed
    await p.stop()


async def test_a_global_cap_on_pending_requests_refuses_with_overloaded() -> None:
    from asgi_llm.core import Overloaded

    made: list[FakeEngine] = []
    settings = Settings(
        models=(ModelConfig(id="a", path="a.gguf"), ModelConfig(id="b", path="b.gguf")),
        max_pending=2,
        retry_after_seconds=3,
    )
    p = ModelPool(settings, engine_factory=lambda config, thread: made.append(FakeEngine(config)) or made[-1])
    await p.start()
    await p.wait_ready()
    async with p.use("a"), p.use("b"):
        with pytest.raises(Overloaded) as refused:
            async with p.use("a"):
                pass
        assert refused.value.retry_after == 3 and refused.value.status == 503
    async with p.use("b"):  # room again once requests finish
        pass
    await p.stop()


async def test_a_request_waiting_for_a_reload_holds_the_model_through_keep_alive_zero() -> None:
    """The load a request waits for ends with nobody using the model yet; with keep_alive 0 the
    idle unload must not fire under the waiting request (under uvloop's callback order it did,
    and the request reloaded the model over and over)."""
    p, made = pool(keep_alive=0)
    await p.start()
    await p.wait_ready()
    await asyncio.sleep(0.01)  # idle: keep_alive 0 unloads it
    assert state(p) == "unloaded"
    async with p.use("m") as (engine, _):
        await asyncio.sleep(0.01)  # the unload timer would have fired by now
        assert state(p) == "ready" and engine is made[-1] and not engine.closed
    assert len(made) == 2  # loaded at start, and once more for this request
    await asyncio.sleep(0.01)
    assert state(p) == "unloaded"
    await p.stop()


async def test_a_request_without_keep_alive_brings_back_the_models_own_policy() -> None:
    """keep_alive 0 on one request unloads after that request only, not after every later one."""
    p, made = pool(keep_alive=None)  # the model's own policy: stay loaded
    await p.start()
    await p.wait_ready()
    async with p.use("m", keep_alive=0):
        pass
    await asyncio.sleep(0.01)
    assert state(p) == "unloaded" and len(made) == 1
    async with p.use("m"):  # reloads; no keep_alive: the model's policy again
        pass
    await asyncio.sleep(0.05)
    assert state(p) == "ready" and len(made) == 2 and p.catalog()[0].expires_at is None
    async with p.use("m", keep_alive=0.02):  # a duration for the idle time after this request
        pass
    assert p.catalog()[0].expires_at is not None
    await asyncio.sleep(0.1)
    assert state(p) == "unloaded"
    await p.stop()


async def test_the_last_request_to_finish_sets_the_idle_time() -> None:
    p, _ = pool(keep_alive=None)
    await p.start()
    await p.wait_ready()
    async with p.use("m", keep_alive=0):
        async with p.use("m"):  # finishes first: its (default) policy is replaced by the one after
            pass
        assert state(p) == "ready"
    await asyncio.sleep(0.01)
    assert state(p) == "unloaded"
    await p.stop()
