"""Ollama's routes at a host's root answer there and nowhere else: every other request reaches
the host untouched, whatever keys are configured (no 401 on the host's own pages and 404s)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from pydantic import SecretStr
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route

from asgi_llm import ApiKeyConfig, LLMApp

pytestmark = pytest.mark.anyio
KEY = "sk-host-0123456789"


def host_with(kit: Any) -> tuple[Starlette, LLMApp]:
    api = LLMApp(pool=kit.fake_pool(kit.fake_settings(api_keys=(ApiKeyConfig(name="team", key=SecretStr(KEY)),))))
    ollama = api.sibling(kit.OLLAMA, health_path=None)

    async def own(request: Any) -> PlainTextResponse:
        return PlainTextResponse(f"the host's {request.url.path}")

    routes = [Route("/", own), Route("/api/users", own), Route("/metrics", own), Mount("/v1", app=api)]
    return Starlette(routes=routes, middleware=[Middleware(ollama.in_front_of)]), api


async def test_the_host_keeps_its_pages_404s_and_root_paths(kit: Any) -> None:
    host, api = host_with(kit)
    transport = httpx.ASGITransport(app=host)
    async with kit.running(api), httpx.AsyncClient(transport=transport, base_url="http://host") as client:
        home = await client.get("/")
        users = await client.post("/api/users")  # the host's route, its method refused by the host
        own_users = await client.get("/api/users")
        missing = await client.get("/api/no-such-page")
        metrics = await client.get("/metrics")
        tags_without_key = await client.get("/api/tags")
        tags = await client.get("/api/tags", headers={"authorization": f"Bearer {KEY}"})
        openai = await client.get("/v1/models", headers={"authorization": f"Bearer {KEY}"})
    assert home.status_code == 200 and home.text == "the host's /"
    assert own_users.status_code == 200 and own_users.text == "the host's /api/users"
    assert users.status_code == 405 and users.text == "Method Not Allowed"  # Starlette's own answer
    assert missing.status_code == 404 and missing.text == "Not Found"  # Starlette's own 404, not ours
    assert metrics.status_code == 200 and metrics.text == "the host's /metrics"
    assert tags_without_key.status_code == 401 and tags_without_key.json()["error"]
    assert tags.status_code == 200 and next(m["name"] for m in tags.json()["models"]).startswith("fake")
    assert openai.status_code == 200 and openai.json()["object"] == "list"


async def test_lifespan_and_other_scopes_reach_the_host(kit: Any) -> None:
    seen: list[str] = []

    async def host(scope: Any, receive: Any, send: Any) -> None:
        seen.append(scope["type"])

    api = LLMApp(pool=kit.fake_pool())
    front = api.sibling(kit.OLLAMA, health_path=None).in_front_of(host)
    await front({"type": "lifespan"}, None, None)
    await front({"type": "websocket", "path": "/api/tags", "headers": []}, None, None)
    await front({"type": "http", "method": "GET", "path": "/elsewhere", "headers": []}, None, None)
    assert seen == ["lifespan", "websocket", "http"]
    assert not api.pool.started  # nothing of ours ran
