"""`GET /openapi.json`: a valid OpenAPI 3.1 document of exactly the routes an app serves,
with request schemas from the adapters' pydantic wire models, below wherever it is mounted."""

from __future__ import annotations

import contextlib
import functools
import json
import re
from collections.abc import AsyncIterator, Sequence
from typing import Any

import httpx
import pytest
from jsonschema import Draft202012Validator
from openapi_spec_validator import validate
from pydantic import SecretStr

from asgi_llm import ApiKeyConfig, LLMApp, ModelConfig, ModelPool, Settings
from asgi_llm.adapters.anthropic import ANTHROPIC
from asgi_llm.adapters.base import Adapter
from asgi_llm.adapters.ollama import OLLAMA
from asgi_llm.adapters.openai import OPENAI
from asgi_llm.engines.fake import FakeEngine

pytestmark = pytest.mark.anyio

CHAT = {"model": "fake", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
METHODS = ("get", "post", "delete", "head")


def fake_app(adapters: Sequence[Adapter], **settings: Any) -> LLMApp:
    pool = ModelPool(
        Settings(models=(ModelConfig(id="fake", path="unused.gguf"),), **settings),
        engine_factory=lambda config, thread: FakeEngine(config, thread),
    )
    return LLMApp(pool=pool, adapters=adapters)


@contextlib.asynccontextmanager
async def client(app: LLMApp, root_path: str = "") -> AsyncIterator[httpx.AsyncClient]:
    """The app started, its model ready, and an HTTP client for it."""
    transport = httpx.ASGITransport(app=app, root_path=root_path)
    async with app.lifespan(), httpx.AsyncClient(transport=transport, base_url="http://test") as http:
        await app.pool.wait_ready()
        yield http


async def fetch(app: LLMApp, **headers: str) -> dict[str, Any]:
    async with client(app) as http:
        reply = await http.get("/openapi.json", headers=headers)
    assert reply.status_code == 200, reply.text
    doc: dict[str, Any] = reply.json()
    return doc


def operations(doc: dict[str, Any]) -> set[tuple[str, str]]:
    return {(method.upper(), path) for path, ops in doc["paths"].items() for method in ops if method in METHODS}


def declared(adapters: Sequence[Adapter]) -> set[tuple[str, str]]:
    return {
        (method, re.sub(r"\{(\w+):path\}", r"{\1}", route.path))
        for adapter in adapters
        for route in adapter.routes
        for method in route.methods
    }


def validate_openapi(doc: dict[str, Any]) -> None:
    """openapi-spec-validator's check (it raises on an invalid document), once per distinct document:
    a test's runs on asyncio and on uvloop fetch the same one."""
    _validate_openapi_text(json.dumps(doc, sort_keys=True))


@functools.cache
def _validate_openapi_text(text: str) -> None:
    validate(json.loads(text))  # a failure is not cached: it raises again


def schema_validator(doc: dict[str, Any], schema: dict[str, Any]) -> Draft202012Validator:
    """Validates against one schema of the document, its `$ref`s into components resolved."""
    return Draft202012Validator({**schema, "components": doc["components"]})


@pytest.mark.parametrize(
    "adapters",
    [(OPENAI,), (ANTHROPIC,), (OLLAMA,), (OPENAI, ANTHROPIC), (OLLAMA, OPENAI, ANTHROPIC)],
    ids=lambda adapters: "+".join(adapter.name for adapter in adapters),  # str() would name memory addresses
)
async def test_the_document_is_valid_openapi_and_lists_exactly_the_served_routes(adapters: tuple[Adapter, ...]) -> None:
    doc = await fetch(fake_app(adapters))
    validate_openapi(doc)
    assert doc["openapi"].startswith("3.1")
    admin = {("POST", "/models/load"), ("POST", "/models/unload"), ("POST", "/models/pin"), ("GET", "/admin/models")}
    app_routes = {("GET", "/health"), ("GET", "/metrics"), ("GET", "/openapi.json"), *admin}
    assert operations(doc) == declared(adapters) | app_routes
    ids = [op["operationId"] for ops in doc["paths"].values() for op in ops.values()]
    assert len(ids) == len(set(ids))


async def test_every_listed_route_is_routed_and_an_unlisted_one_is_not() -> None:
    app = fake_app((OLLAMA, OPENAI))
    doc = await fetch(app)
    assert "/messages" not in doc["paths"]  # Anthropic is not enabled here
    async with client(app) as http:
        for method, path in sorted(operations(doc)):
            reply = await http.request(
                method, path.replace("{", "").replace("}", ""), json={} if method == "POST" else None
            )
            assert reply.status_code not in (404, 405) or "No route" not in reply.text, (method, path, reply.text)
        missing = await http.post("/messages", json={})
        assert missing.status_code == 404 and "No route" in missing.text


async def test_request_schemas_come_from_the_wire_models_and_judge_bodies_as_the_app_does() -> None:
    app = fake_app((OPENAI, OLLAMA))
    doc = await fetch(app)
    chat = doc["paths"]["/chat/completions"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    check = schema_validator(doc, chat)
    assert check.is_valid(CHAT)
    assert not check.is_valid({"model": "fake"})  # no messages
    assert not check.is_valid({**CHAT, "temperature": 3})  # above the model's bound
    ollama = doc["paths"]["/api/chat"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert schema_validator(doc, ollama).is_valid({"model": "fake", "messages": [], "stream": False})
    async with client(app) as http:  # the app agrees with the schema on both bodies
        assert (await http.post("/chat/completions", json=CHAT)).status_code == 200
        assert (await http.post("/chat/completions", json={**CHAT, "temperature": 3})).status_code == 400


async def test_the_chat_reply_schema_comes_from_its_typed_shape_and_fits_a_real_reply() -> None:
    app = fake_app((OPENAI,))
    doc = await fetch(app)
    ok = doc["paths"]["/chat/completions"]["post"]["responses"]["200"]["content"]
    assert set(ok) == {"application/json", "text/event-stream"}
    assert ok["application/json"]["schema"] == {"$ref": "#/components/schemas/ChatCompletion"}
    async with client(app) as http:
        reply = (await http.post("/chat/completions", json=CHAT)).json()
    check = schema_validator(doc, ok["application/json"]["schema"])
    assert check.is_valid(reply)
    assert not check.is_valid({**reply, "choices": "none"})
    error = doc["paths"]["/chat/completions"]["post"]["responses"]["default"]["content"]["application/json"]
    assert error["example"]["error"]["param"] == "model"  # OpenAI's own error envelope


async def test_the_tokenizer_replies_schemas_come_from_their_typed_shapes_and_fit_real_replies() -> None:
    app = fake_app((OPENAI,))
    doc = await fetch(app)
    paths = doc["paths"]
    assert {"/tokenize", "/detokenize", "/apply-template"} <= set(paths)
    tokenize = paths["/tokenize"]["post"]
    check = schema_validator(doc, tokenize["responses"]["200"]["content"]["application/json"]["schema"])
    body = schema_validator(doc, tokenize["requestBody"]["content"]["application/json"]["schema"])
    assert body.is_valid({"content": "é", "with_pieces": True}) and not body.is_valid({"content": 1})
    async with client(app) as http:
        for asked in ({"content": "é"}, {"content": "é", "with_pieces": True}):
            reply = (await http.post("/tokenize", json=asked)).json()
            assert check.is_valid(reply), reply
        template = (await http.post("/apply-template", json={"messages": CHAT["messages"]})).json()
    assert not check.is_valid({"tokens": [{"id": 1}], "count": 1, "max_model_len": 8})  # a piece is required
    shape = paths["/apply-template"]["post"]["responses"]["200"]["content"]["application/json"]["schema"]
    assert schema_validator(doc, shape).is_valid(template)


async def test_servers_follow_the_mount_point() -> None:
    app = fake_app((OPENAI,))
    async with client(app, root_path="/llm/v1") as http:
        doc = (await http.get("/llm/v1/openapi.json")).json()
    assert doc["servers"] == [{"url": "/llm/v1"}]
    assert "/chat/completions" in doc["paths"]  # paths stay relative to the mount


async def test_with_keys_it_needs_any_key_and_says_which_routes_are_public() -> None:
    keys = (
        ApiKeyConfig(name="ops", key=SecretStr("op-secret"), operator=True),
        ApiKeyConfig(name="user", key=SecretStr("user-secret")),
    )
    app = fake_app((OPENAI,), api_keys=keys)
    async with client(app) as http:
        assert (await http.get("/openapi.json")).status_code == 401
    doc = await fetch(app, authorization="Bearer user-secret")  # an ordinary key, as for /models
    validate_openapi(doc)
    assert set(doc["components"]["securitySchemes"]) == {"bearer", "apiKey"}
    assert doc["paths"]["/health"]["get"]["security"] == []
    assert "security" not in doc["paths"]["/chat/completions"]["post"]
    assert "403" in doc["paths"]["/metrics"]["get"]["responses"]
    assert "op-secret" not in str(doc) and "user-secret" not in str(doc)


async def test_without_keys_or_metrics_the_document_says_neither() -> None:
    doc = await fetch(fake_app((OPENAI,), metrics_path=None))
    assert "securitySchemes" not in doc["components"] and "security" not in doc
    assert "/metrics" not in doc["paths"]


async def test_the_web_page_is_listed_only_where_it_is_served_and_needs_no_key() -> None:
    assert "/ui" not in (await fetch(fake_app((OPENAI,))))["paths"]
    keys = (ApiKeyConfig(name="user", key=SecretStr("user-secret")),)
    doc = await fetch(fake_app((OPENAI,), web_ui=True, api_keys=keys), authorization="Bearer user-secret")
    validate_openapi(doc)
    assert doc["paths"]["/ui"]["get"]["operationId"] == "web_ui"
    assert doc["paths"]["/ui/{file}"]["get"]["parameters"][0]["name"] == "file"
    assert doc["paths"]["/ui"]["get"]["security"] == [] == doc["paths"]["/ui/{file}"]["get"]["security"]
