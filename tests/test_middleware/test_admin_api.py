"""The admin routes: operator keys load, unload and list models; other keys get 403 in the
protocol's envelope; bodies are llama-server's `{"model": ...}`."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from pydantic import SecretStr

from asgi_llm import LLMApp, ModelConfig, ModelPool, Settings
from asgi_llm.config import ApiKeyConfig
from asgi_llm.engines.fake import FakeEngine

pytestmark = pytest.mark.anyio

KEYS = (
    ApiKeyConfig(name="ops", key=SecretStr("sk-ops"), operator=True),
    ApiKeyConfig(name="user", key=SecretStr("sk-user")),
)


def app(**settings: object) -> LLMApp:
    models = (
        ModelConfig(id="a", path="a.gguf", load="lazy"),
        ModelConfig(id="b", path="b.gguf", load="lazy", pin=True),
    )
    pool = ModelPool(Settings(models=models, api_keys=KEYS, **settings), engine_factory=lambda c, t: FakeEngine(c))  # type: ignore[arg-type]
    return LLMApp(pool=pool)


def client(llm: LLMApp, key: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=llm), base_url="http://test", headers={"authorization": f"Bearer {key}"}
    )


def states(listing: httpx.Response) -> dict[str, str]:
    return {m["id"]: m["state"] for m in listing.json()["data"]}


async def test_an_operator_loads_lists_and_unloads() -> None:
    llm = app(max_loaded_models=1)
    async with llm.lifespan(), client(llm, "sk-ops") as http:
        assert states(await http.get("/admin/models")) == {"a": "unloaded", "b": "unloaded"}
        loaded = await http.post("/models/load", json={"model": "a"})
        assert loaded.status_code == 200 and loaded.json() == {"success": True}
        listing = (await http.get("/admin/models")).json()["data"]
        assert listing[0]["state"] == "ready" and listing[0]["last_used"] is not None
        assert listing[1]["pinned"] is True and listing[0]["estimated_memory"]["total"] > 0
        assert [m["kind"] for m in listing] == ["local", "local"]  # where each runs; not overwritten by `backend`
        assert listing[0]["backend"] == {} and listing[1]["backend"] == {}  # the fake engine describes nothing
        health = (await http.get("/health")).json()["models"]
        assert [set(m) for m in health] == [{"id", "state", "estimated_memory", "pinned"}] * 2
        await http.post("/models/load", json={"model": "b"})  # max 1: a (idle) unloads
        assert states(await http.get("/admin/models")) == {"a": "unloaded", "b": "ready"}
        refused = await http.post("/models/load", json={"model": "a"})  # b is pinned
        assert refused.status_code == 507 and "max_loaded_models = 1" in refused.json()["error"]["message"]
        assert (await http.post("/models/unload", json={"model": "b"})).status_code == 200
        assert states(await http.get("/admin/models")) == {"a": "unloaded", "b": "unloaded"}


async def test_other_keys_are_refused_and_bodies_are_checked() -> None:
    llm = app()
    async with llm.lifespan(), client(llm, "sk-user") as user, client(llm, "sk-ops") as ops:
        for call in (user.get("/admin/models"), user.post("/models/load", json={"model": "a"})):
            refused = await call
            assert refused.status_code == 403 and "operator" in refused.json()["error"]["message"]
        unknown = await ops.post("/models/load", json={"model": "nope"})
        assert unknown.status_code == 404
        extra = await ops.post("/models/unload", json={"model": "a", "force": True})
        assert extra.status_code == 400 and "force" in extra.json()["error"]["message"]
        missing = await ops.post("/models/load", json={})
        assert missing.status_code == 400 and "model" in missing.json()["error"]["message"]


async def test_admin_api_off_leaves_the_paths_to_the_protocols() -> None:
    llm = app(admin_api=False)
    async with llm.lifespan(), client(llm, "sk-ops") as http:
        assert (await http.post("/models/load", json={"model": "a"})).status_code in (404, 405)


async def test_an_operator_pins_and_unpins_at_run_time() -> None:
    llm = app(max_loaded_models=1)
    async with llm.lifespan(), client(llm, "sk-ops") as http:
        await http.post("/models/unload", json={"model": "b"})
        assert (await http.post("/models/pin", json={"model": "b", "pinned": False})).status_code == 200
        assert (await http.post("/models/load", json={"model": "b"})).status_code == 200
        await asyncio.sleep(0.01)  # the unload's keep_alive 0 no longer applies: b stays loaded
        assert states(await http.get("/admin/models")) == {"a": "unloaded", "b": "ready"}
        assert (await http.post("/models/pin", json={"model": "a"})).status_code == 200  # pinned: true by default
        await http.post("/models/load", json={"model": "a"})  # b is no longer pinned: it makes room
        listing = {m["id"]: m for m in (await http.get("/admin/models")).json()["data"]}
        assert listing["a"]["state"] == "ready" and listing["a"]["pinned"]
        assert listing["b"]["state"] == "unloaded" and not listing["b"]["pinned"]
        bad = await http.post("/models/pin", json={"model": "a", "pinned": "yes"})
        assert bad.status_code == 400 and "pinned" in bad.json()["error"]["message"]


async def test_a_stalled_model_turns_health_503_naming_it_and_its_reason() -> None:
    from asgi_llm.core import EngineHealth

    engines: list[FakeEngine] = []

    def make(config: ModelConfig, thread: object) -> FakeEngine:
        engines.append(FakeEngine(config))
        return engines[-1]

    models = (ModelConfig(id="a", path="a.gguf", load="lazy"),)
    llm = LLMApp(pool=ModelPool(Settings(models=models, api_keys=KEYS), engine_factory=make))  # type: ignore[arg-type]
    async with llm.lifespan(), client(llm, "sk-ops") as http:
        assert (await http.post("/models/load", json={"model": "a"})).status_code == 200
        assert (await http.get("/health")).status_code == 200
        engines[0].state = EngineHealth(stalled="its requests made no progress for 31s", stalls=1)
        health = await http.get("/health")
        assert health.status_code == 503 and health.json()["status"] == "stalled"
        (model,) = health.json()["models"]
        assert model == {**model, "id": "a", "state": "stalled", "error": "its requests made no progress for 31s"}
        assert states(await http.get("/admin/models")) == {"a": "stalled"}
        metrics = (await http.get("/metrics")).text
        assert 'asgi_llm_engine_stalled{model="a"} 1' in metrics and 'asgi_llm_engine_stalls_total{model="a"} 1' in metrics
        engines[0].state = EngineHealth(stalls=1, restarts=1)  # restarted: it serves again
        assert (await http.get("/health")).status_code == 200
        assert states(await http.get("/admin/models")) == {"a": "ready"}
