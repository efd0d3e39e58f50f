"""Request ids in error bodies (each protocol's own place for it) and in our log lines."""

from __future__ import annotations

import functools
import json
import logging
from typing import Any

import pytest
from pydantic import SecretStr

from asgi_llm import ApiKeyConfig, KeyInfo, LimitsConfig, LLMApp
from asgi_llm.logs import OWN_LOGGERS, RequestIdFilter
from asgi_llm.middleware import AuthMiddleware, KeyStore, Limiter, Limits, LimitsMiddleware

pytestmark = pytest.mark.anyio

TEAM, NARROW = "sk-team-0123456789", "sk-narrow-0123456789"
KEYS = (
    ApiKeyConfig(name="team", key=SecretStr(TEAM)),
    ApiKeyConfig(name="narrow", key=SecretStr(NARROW), models=("other",), limits=LimitsConfig(requests_per_minute=1)),
)
PROTOCOLS = {
    "openai": ("/chat/completions", "CHAT", []),
    "anthropic": ("/messages", "MESSAGES", [("anthropic-version", "2023-06-01")]),
    "ollama": ("/api/chat", "OLLAMA_CHAT", []),
}


def request_id_in(protocol: str, body: Any) -> Any:
    """Where each protocol keeps it: inside OpenAI's error object (its SDK reads the known
    fields), top-level in Anthropic's (as Anthropic's own API does), beside Ollama's `error`."""
    if protocol == "openai":
        assert set(body) == {"error"}
        return body["error"]["request_id"]
    if protocol == "anthropic":
        assert body["type"] == "error" and set(body["error"]) == {"type", "message"}
        return body["request_id"]
    assert set(body) == {"error", "request_id"} and isinstance(body["error"], str)
    return body["request_id"]


def keyed_app(kit: Any) -> LLMApp:
    settings = kit.fake_settings(api_keys=KEYS, max_body_bytes=2000)
    return LLMApp(pool=kit.fake_pool(settings, engine=kit.SlowEngine), adapters=kit.ALL)


@pytest.mark.parametrize("protocol", list(PROTOCOLS))
async def test_every_kind_of_error_carries_the_id_of_its_x_request_id_header(kit: Any, protocol: str) -> None:
    path, body_name, extra = PROTOCOLS[protocol]
    body = getattr(kit, body_name)
    team, narrow = [*extra, ("x-api-key", TEAM)], [*extra, ("x-api-key", NARROW)]
    llm = keyed_app(kit)
    async with kit.running(llm):
        first = await kit.drive(llm, "POST", path, json={**body, "model": "other"}, headers=narrow)
        assert first.status == 200  # the key's one request this minute
        replies = {
            "401 missing key": await kit.drive(llm, "POST", path, json=body, headers=extra),
            "403 model": await kit.drive(llm, "POST", path, json=body, headers=narrow),
            "429 limit": await kit.drive(llm, "POST", path, json={**body, "model": "other"}, headers=narrow),
            "400 not json": await kit.drive(llm, "POST", path, body=b"{nope", headers=narrow),
            "413 too large": await kit.drive(llm, "POST", path, body=b" " * 5000, headers=narrow),
            "400 invalid": await kit.drive(llm, "POST", path, json={**body, "messages": 3}, headers=team),
            "404 model": await kit.drive(llm, "POST", path, json={**body, "model": "nope"}, headers=team),
            "404 route": await kit.drive(llm, "POST", "/no/such/route", json=body, headers=team),
            "405 method": await kit.drive(llm, "GET", path, headers=team),
        }
    for what, reply in replies.items():
        assert reply.status == int(what[:3]), (what, reply.body)
        # an unknown route of an app whose first protocol is OpenAI's answers in OpenAI's envelope
        # (Anthropic's clients are known by their header)
        envelope = "openai" if what == "404 route" and protocol == "ollama" else protocol
        assert request_id_in(envelope, reply.json()) == reply.headers["x-request-id"], what
    assert len({reply.headers["x-request-id"] for reply in replies.values()}) == len(replies)


async def test_a_clients_own_request_id_comes_back_in_the_error_body(kit: Any) -> None:
    llm = keyed_app(kit)
    async with kit.running(llm):
        reply = await kit.drive(llm, "POST", "/chat/completions", json=kit.CHAT, headers=[("x-request-id", "trace-42")])
    assert reply.status == 401 and reply.headers["x-request-id"] == "trace-42"
    assert reply.json()["error"]["request_id"] == "trace-42"


async def test_middleware_around_a_plain_app_puts_the_id_in_the_plain_envelope(kit: Any) -> None:
    async def plain(scope: Any, receive: Any, send: Any) -> None:
        raise AssertionError("refused before reaching the app")

    app = AuthMiddleware(
        LimitsMiddleware(plain, limiter=Limiter(Limits(requests_per_minute=1))),
        verify=KeyStore([(TEAM, KeyInfo("team"))]),
    )
    reply = await kit.drive(app, "GET", "/anything", headers=[("x-request-id", "abc")])
    assert reply.status == 401 and reply.json()["error"]["request_id"] == "abc"


class Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


async def test_our_log_lines_name_the_request_and_the_hosts_loggers_are_untouched(kit: Any) -> None:
    def broken(key: str) -> Any:
        raise RuntimeError("the host's user store is down")

    async def verify(key: str) -> KeyInfo | None:
        return broken(key)

    host = logging.getLogger("host.app")
    root = logging.getLogger()
    before = (list(host.filters), list(host.handlers), list(root.filters), list(root.handlers))
    collect = Collect()
    auth_log = logging.getLogger("asgi_llm.auth")
    auth_log.addHandler(collect)
    try:
        llm = LLMApp(pool=kit.fake_pool(kit.fake_settings()), adapters=kit.ALL, verify=verify)
        async with kit.running(llm):
            reply = await kit.drive(llm, "GET", "/models", headers=[("x-api-key", "k"), ("x-request-id", "r-7")])
        logging.getLogger("asgi_llm.auth").error("outside any request")
    finally:
        auth_log.removeHandler(collect)
    assert reply.status == 500 and reply.json()["error"]["request_id"] == "r-7"
    inside, outside = collect.records
    assert inside.getMessage() == "the API key verifier raised RuntimeError [request r-7]"
    assert inside.request_id == "r-7"  # type: ignore[attr-defined]
    assert outside.getMessage() == "outside any request" and outside.request_id is None  # type: ignore[attr-defined]
    assert (list(host.filters), list(host.handlers), list(root.filters), list(root.handlers)) == before
    for name in OWN_LOGGERS:
        filters = logging.getLogger(name).filters
        assert sum(isinstance(f, RequestIdFilter) for f in filters) == 1, name  # once, however many apps
        assert not logging.getLogger(name).handlers, name


async def test_concurrent_requests_each_log_their_own_id(kit: Any) -> None:
    import anyio

    seen: dict[str, str] = {}

    async def verify(key: str) -> KeyInfo | None:
        await anyio.sleep(0.01)  # both requests are in flight at once
        logging.getLogger("asgi_llm.auth").warning("checking %s", key)
        return KeyInfo(key)

    collect = Collect()
    logging.getLogger("asgi_llm.auth").addHandler(collect)
    try:
        llm = LLMApp(pool=kit.fake_pool(kit.fake_settings()), adapters=kit.ALL, verify=verify)
        async with kit.running(llm), anyio.create_task_group() as group:
            for key in ("one", "two"):
                headers = [("x-api-key", key), ("x-request-id", f"id-{key}")]
                group.start_soon(functools.partial(kit.drive, llm, "GET", "/models", headers=headers))
    finally:
        logging.getLogger("asgi_llm.auth").removeHandler(collect)
    for record in collect.records:
        seen[str(record.args[0])] = record.request_id  # type: ignore[attr-defined,index]
    assert seen == {"one": "id-one", "two": "id-two"}


@pytest.mark.parametrize(
    ("path", "body_name", "extra"),
    [
        ("/chat/completions", "CHAT", []),
        ("/completions", "", []),
        ("/messages", "MESSAGES", [("anthropic-version", "2023-06-01")]),
        ("/api/chat", "OLLAMA_CHAT", []),
    ],
)
async def test_an_error_event_in_a_begun_stream_carries_the_id(
    kit: Any, path: str, body_name: str, extra: list[tuple[str, str]]
) -> None:
    from asgi_llm.core import Overloaded, TextDelta
    from asgi_llm.engines.fake import FakeEngine

    class Breaks(FakeEngine):
        async def _events(self, request: Any) -> Any:
            yield TextDelta("Hel")
            raise Overloaded("The model stopped.")

    body = getattr(kit, body_name) if body_name else {"model": "fake", "prompt": "hi"}
    llm = LLMApp(pool=kit.fake_pool(engine=Breaks), adapters=kit.ALL)
    async with kit.running(llm):
        headers = [*extra, ("x-request-id", "s-1")]
        reply = await kit.drive(llm, "POST", path, json={**body, "stream": True}, headers=headers)
    assert reply.status == 200 and reply.headers["x-request-id"] == "s-1"
    last = [line for line in reply.body.decode().splitlines() if line.strip() and line.strip() != "data: [DONE]"][-1]
    event = json.loads(last.removeprefix("data: "))
    assert "The model stopped." in json.dumps(event)
    openai = path in ("/chat/completions", "/completions")  # inside the error object; elsewhere top-level
    assert (event["error"] if openai else event)["request_id"] == "s-1"
