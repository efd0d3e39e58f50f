"""A key's `max_tokens` cap refuses a request over it naming the field the client sent."""

from __future__ import annotations

import functools
from typing import Any

import pytest

from asgi_llm import KeyInfo, LLMApp
from asgi_llm.middleware import AuthMiddleware, KeyStore, Limiter, Limits, LimitsMiddleware

pytestmark = pytest.mark.anyio

AUTH = [("x-api-key", "sk-capped-123")]
HI = [{"role": "user", "content": "hi"}]
CASES = [
    pytest.param("/chat/completions", {"messages": HI, "max_tokens": 5}, "max_tokens", id="chat-max_tokens"),
    pytest.param(
        "/chat/completions", {"messages": HI, "max_completion_tokens": 5}, "max_completion_tokens", id="chat-mct"
    ),
    pytest.param("/completions", {"prompt": "hi", "max_tokens": 5}, "max_tokens", id="completions"),
    pytest.param("/responses", {"input": "hi", "max_output_tokens": 5}, "max_output_tokens", id="responses"),
    pytest.param("/messages", {"messages": HI, "max_tokens": 5}, "max_tokens", id="anthropic"),
    pytest.param("/api/chat", {"messages": HI, "options": {"num_predict": 5}}, "options.num_predict", id="ollama-chat"),
    pytest.param(
        "/api/generate", {"prompt": "hi", "options": {"num_predict": 5}}, "options.num_predict", id="ollama-gen"
    ),
]


def capped_app(kit: Any) -> LLMApp:
    layers = [
        functools.partial(AuthMiddleware, verify=KeyStore([("sk-capped-123", KeyInfo("team"))])),
        functools.partial(LimitsMiddleware, limiter=Limiter(Limits(max_tokens=1))),
    ]
    return LLMApp(pool=kit.fake_pool(), adapters=kit.ALL, middleware=layers)


def refusal(path: str, body: Any) -> tuple[str, str | None]:
    """The message and, where the protocol carries one (OpenAI's), the `param` of the error body."""
    if path.startswith("/api/"):
        return body["error"], None
    if path == "/messages":
        return body["error"]["message"], None
    return body["error"]["message"], body["error"]["param"]


def openai(path: str) -> bool:
    return not path.startswith("/api/") and path != "/messages"


@pytest.mark.parametrize(("path", "fields", "named"), CASES)
async def test_the_refusal_names_the_field_sent(kit: Any, path: str, fields: dict[str, Any], named: str) -> None:
    llm = capped_app(kit)
    headers = [*AUTH, ("anthropic-version", "2023-06-01")] if path == "/messages" else AUTH
    extra = {"stream": False} if path.startswith("/api/") else {}
    async with kit.running(llm):
        over = await kit.drive(llm, "POST", path, json={"model": "fake", **extra, **fields}, headers=headers)
        within = await kit.drive(llm, "POST", path, json={"model": "fake", **extra, **one(fields)}, headers=headers)
    message, param = refusal(path, over.json())
    assert over.status == 400, over.body
    assert message == f"'{named}' is 5, more than this API key's limit of 1."
    assert param == (named if openai(path) else None)
    assert within.status == 200, within.body


def one(fields: dict[str, Any]) -> dict[str, Any]:
    """The same request asking for 1 token, which the cap allows."""
    asks = {"max_tokens": 1, "max_completion_tokens": 1, "max_output_tokens": 1, "options": {"num_predict": 1}}
    return {key: asks.get(key, value) for key, value in fields.items()}
