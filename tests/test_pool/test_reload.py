"""Reload without a restart (fake engine): models added, removed and changed; a changed or
removed model's request in flight finishes; keys added and revoked take effect at once."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from asgi_llm import LLMApp, ModelConfig, ModelPool, Settings
from asgi_llm.core import ModelNotFound
from asgi_llm.engines.fake import FakeEngine

pytestmark = pytest.mark.anyio


def factory(made: list[FakeEngine]):  # type: ignore[no-untyped-def]
    def make(config: ModelConfig, thread: object) -> FakeEngine:
        made.append(FakeEngine(config))
        return made[-1]

    return make


async def test_models_are_added_removed_and_changed_without_cutting_requests() -> None:
    made: list[FakeEngine] = []
    a, b = ModelConfig(id="a", path="a.gguf", load="lazy"), ModelConfig(id="b", path="b.gguf", load="lazy")
    pool = ModelPool(Settings(models=(a, b)), engine_factory=factory(made))
    await pool.start()
    async with pool.use("b"):
        pass
    release = asyncio.Event()

    async def in_flight() -> bool:
        async with pool.use("a") as (engine, _):
            await release.wait()
            return bool(engine.config.n_ctx == 4096 and not engine.closed)  # type: ignore[attr-defined]

    running = asyncio.create_task(in_flight())
    await asyncio.sleep(0.01)
    changed = a.model_copy(update={"n_ctx": 512})
    await pool.reload(Settings(models=(changed, ModelConfig(id="c", path="c.gguf", load="lazy"))))
    assert [card.id for card in pool.catalog()] == ["a", "c"]
    with pytest.raises(ModelNotFound):
        async with pool.use("b"):
            pass
    first_b, first_a = made
    assert first_b.closed  # b was idle: unloaded at once
    assert not first_a.closed  # a serves its request to the end
    release.set()
    assert await running
    await asyncio.sleep(0.01)
    assert first_a.closed
    async with pool.use("a") as (engine, _):
        assert engine.config.n_ctx == 512  # type: ignore[attr-defined]
    async with pool.use("c"):
        pass
    await pool.stop()


async def test_reload_rereads_the_keys_file(tmp_path: Path) -> None:
    keys = tmp_path / "keys.txt"
    keys.write_text("alice=sk-alice\n")
    pool = ModelPool(
        Settings(models=(ModelConfig(id="m", path="m.gguf"),), api_keys_file=str(keys)),
        engine_factory=lambda c, t: FakeEngine(c),
    )
    llm = LLMApp(pool=pool)
    chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}

    async def status(key: str) -> int:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=llm), base_url="http://t") as http:
            reply = await http.post("/chat/completions", json=chat, headers={"authorization": f"Bearer {key}"})
            return reply.status_code

    async with llm.lifespan():
        await pool.wait_ready()
        assert await status("sk-alice") == 200 and await status("sk-bob") == 401
        keys.write_text("bob=sk-bob\n")
        await llm.reload()
        assert await status("sk-alice") == 401 and await status("sk-bob") == 200


async def test_reload_rescans_models_dir(tmp_path: Path) -> None:
    (tmp_path / "one.gguf").write_bytes(b"GGUF")
    pool = ModelPool(Settings(models_dir=str(tmp_path)), engine_factory=lambda c, t: FakeEngine(c))
    await pool.start()
    assert [c.id for c in pool.catalog()] == ["one"]
    (tmp_path / "two.gguf").write_bytes(b"GGUF")
    (tmp_path / "one.gguf").unlink()
    await pool.reload()
    assert [c.id for c in pool.catalog()] == ["two"]
    await pool.stop()


async def test_a_model_removed_while_busy_is_closed_at_stop_if_still_loaded() -> None:
    made: list[FakeEngine] = []
    pool = ModelPool(Settings(models=(ModelConfig(id="a", path="a.gguf"),)), engine_factory=factory(made))
    await pool.start()
    await pool.wait_ready()
    async with pool.use("a"):
        await pool.reload(Settings(models=(ModelConfig(id="b", path="b.gguf", load="lazy"),)))
        assert not made[0].closed
        await pool.stop()  # the host stops while the request still holds it
    assert made[0].closed
