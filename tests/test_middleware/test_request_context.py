"""One `RequestContext` under one state key, and one owner of the request id's header."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import SecretStr

from asgi_llm import ApiKeyConfig, LimitsConfig, LLMApp, default_middleware
from asgi_llm.http.context import CONTEXT, with_request_id_header
from asgi_llm.middleware import KEY, KEY_INFO, RequestContext, UsageMiddleware, UsageRecord, request_context

pytestmark = pytest.mark.anyio

KEYS = (ApiKeyConfig(name="team", key=SecretStr("sk-context-1"), limits=LimitsConfig(max_tokens=4)),)
ANTHROPIC = [("anthropic-version", "2023-06-01")]


async def test_the_layers_share_one_context_under_one_key(kit: Any) -> None:
    seen: list[tuple[set[str], RequestContext]] = []

    def host_layer(app: Any) -> Any:
        async def layer(scope: Any, receive: Any, send: Any) -> None:
            seen.append((set(scope["state"]), request_context(scope)))
            await app(scope, receive, send)

        return layer

    pool = kit.fake_pool(kit.fake_settings(api_keys=KEYS))
    llm = LLMApp(pool=pool, adapters=kit.ALL, middleware=[*default_middleware(pool), host_layer])
    async with kit.running(llm):
        reply = await kit.drive(
            llm, "POST", "/messages", json=kit.MESSAGES, headers=[("x-api-key", "sk-context-1"), *ANTHROPIC]
        )
    assert reply.status == 400  # asks for 16 tokens, over the key's 4
    ((keys, context),) = seen
    assert keys == {CONTEXT, KEY, KEY_INFO}  # the context, and the key's name where host code reads it
    assert context.request_id == reply.headers["x-request-id"] == reply.json()["request_id"]
    assert context.key is not None and context.key.name == "team"
    assert context.info is not None and (context.info.protocol, context.info.endpoint) == ("anthropic", "/messages")
    assert context.max_tokens == 4 and context.body == kit.MESSAGES and context.meter is not None
    assert context.match is not None and context.in_process is None


async def test_the_request_id_header_is_added_once_by_one_wrapper() -> None:
    scope: dict[str, Any] = {"type": "http", "headers": [(b"x-request-id", b"mine-1")]}
    sent: list[Any] = []

    async def send(message: Any) -> None:
        sent.append(message)

    first = with_request_id_header(scope, send)
    assert first is not send and with_request_id_header(scope, first) is first  # a second layer adds nothing
    await first({"type": "http.response.start", "status": 200, "headers": []})
    assert sent[0]["headers"] == [(b"x-request-id", b"mine-1")]


@pytest.mark.parametrize("outside", [False, True], ids=["usage-inside", "usage-outside"])
async def test_each_response_carries_each_id_header_once(kit: Any, outside: bool) -> None:
    """Usage and the app both want the header; wherever usage sits, it appears once, and the
    Anthropic `request-id` beside it, with the id the usage record has."""
    records: list[UsageRecord] = []
    if outside:
        llm = LLMApp(pool=kit.fake_pool(), adapters=kit.ALL, middleware=())
        app: Any = UsageMiddleware(llm, sinks=[records.append], classify=llm.classify)
    else:
        llm = app = LLMApp(pool=kit.fake_pool(), adapters=kit.ALL, middleware=[_usage(records)])
    starts: list[list[tuple[bytes, bytes]]] = []

    def watch(app: Any) -> Any:
        async def watched(scope: Any, receive: Any, send: Any) -> None:
            async def sending(message: Any) -> None:
                if message["type"] == "http.response.start":
                    starts.append(list(message["headers"]))
                await send(message)

            await app(scope, receive, sending)

        return watched

    async with kit.running(llm):
        reply = await kit.drive(watch(app), "POST", "/messages", json=kit.MESSAGES, headers=ANTHROPIC)
    names = [name for name, _ in starts[0]]
    assert reply.status == 200 and names.count(b"x-request-id") == 1 and names.count(b"request-id") == 1
    assert reply.headers["request-id"] == reply.headers["x-request-id"] == records[0].request_id


def _usage(records: list[UsageRecord]) -> Any:
    def layer(app: Any) -> Any:
        return UsageMiddleware(app, sinks=[records.append])

    return layer


async def test_an_in_process_request_has_its_own_context(kit: Any) -> None:
    records: list[UsageRecord] = []
    llm = LLMApp(pool=kit.fake_pool(), middleware=[_usage(records)])
    async with kit.running(llm):
        result = await llm.client(key="reports").chat([{"role": "user", "content": "hi"}], model="fake")
    (record,) = records
    assert (record.request_id, record.key, record.protocol) == (result.request_id, "reports", "in_process")
