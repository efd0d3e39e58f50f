"""Every route the app serves, as `/openapi.json` lists them, under each kind of caller: no key,
a tenant's key, an operator's key. Tenants get inference and the model lists; only operators
get what spans every key (metrics) or changes the server (admin); public paths need no key."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from asgi_llm import ApiKeyConfig, LLMApp, ModelConfig, ModelPool, Settings
from asgi_llm.adapters.anthropic import ANTHROPIC
from asgi_llm.adapters.ollama import OLLAMA
from asgi_llm.adapters.openai import OPENAI
from asgi_llm.engines.fake import FakeEngine

pytestmark = pytest.mark.anyio

KEYS = (
    ApiKeyConfig(name="tenant", key=SecretStr("sk-tenant")),
    ApiKeyConfig(name="ops", key=SecretStr("sk-ops"), operator=True),
)
OPERATOR_ONLY = {"/metrics", "/models/load", "/models/unload", "/models/pin", "/admin/models"}
OPERATOR_WRITES = {("POST", "/lora-adapters")}  # anyone may read the adapters; only an operator sets their scales
PUBLIC = {"/health", "/ui", "/ui/{file}"}


def every_protocol_app() -> LLMApp:
    settings = Settings(models=(ModelConfig(id="fake", path="unused.gguf", load="lazy"),), api_keys=KEYS, web_ui=True)
    pool = ModelPool(settings, engine_factory=lambda config, thread: FakeEngine(config, thread))
    return LLMApp(pool=pool, adapters=(OPENAI, ANTHROPIC, OLLAMA))


def body_for(path: str) -> dict[str, Any]:
    return {"model": "fake"} if path.startswith(("/models/", "/admin")) else {}


async def test_each_route_answers_each_kind_of_caller_as_its_scope_says() -> None:
    app = every_protocol_app()
    transport = httpx.ASGITransport(app=app)
    async with app.lifespan(), httpx.AsyncClient(transport=transport, base_url="http://test") as http:
        doc = (await http.get("/openapi.json", headers={"authorization": "Bearer sk-ops"})).json()
        routes = sorted(
            (method.upper(), path) for path, ops in doc["paths"].items() for method in ops if method != "parameters"
        )
        assert {path for _, path in routes} >= OPERATOR_ONLY | PUBLIC | {"/chat/completions", "/messages", "/api/chat"}
        seen: dict[str, set[tuple[str, int]]] = {}
        for method, template in routes:
            path = re.sub(r"\{[^}]+\}", "app.js" if template.startswith("/ui") else "fake", template)
            for caller, key in (("none", None), ("tenant", "sk-tenant"), ("operator", "sk-ops")):
                headers = {"authorization": f"Bearer {key}"} if key else {}
                json = body_for(template) if method in ("POST", "PUT", "PATCH") else None
                reply = await http.request(method, path, headers=headers, json=json)
                seen.setdefault(template, set()).add((caller, reply.status_code))
                if template in PUBLIC:
                    assert reply.status_code not in (401, 403), (method, template, caller, reply.text)
                elif caller == "none":
                    assert reply.status_code == 401, (method, template, reply.text)
                elif (template in OPERATOR_ONLY or (method, template) in OPERATOR_WRITES) and caller == "tenant":
                    assert reply.status_code == 403, (method, template, reply.text)
                else:
                    assert reply.status_code not in (401, 403), (method, template, caller, reply.text)
    assert len(seen) == len({path for _, path in routes})
