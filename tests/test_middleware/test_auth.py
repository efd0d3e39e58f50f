"""API keys: 401/403 in each protocol's envelope, constant-time checks, allow-lists, verifiers."""

from __future__ import annotations

import functools
import hmac
import logging
from typing import Any

import pytest
from pydantic import SecretStr

from asgi_llm import ApiKeyConfig, KeyInfo, LLMApp
from asgi_llm.middleware import KEY, KEY_INFO, AuthMiddleware, KeyStore

pytestmark = pytest.mark.anyio

TEAM, NARROW, CLAUDE = "sk-team-0123456789", "sk-narrow-0123456789", "sk-claude-0123456789"
KEYS = (
    ApiKeyConfig(name="team", key=SecretStr(TEAM), operator=True),
    ApiKeyConfig(name="narrow", key=SecretStr(NARROW), models=("default",)),
    ApiKeyConfig(name="claude", key=SecretStr(CLAUDE), protocols=("anthropic",)),
)


def keyed_app(kit: Any, **options: Any) -> LLMApp:
    return LLMApp(
        pool=kit.fake_pool(kit.fake_settings(api_keys=KEYS), engine=kit.SlowEngine), adapters=kit.ALL, **options
    )


def requests(kit: Any) -> list[tuple[str, str, dict[str, Any], list[tuple[str, str]]]]:
    return [
        ("openai", "/chat/completions", kit.CHAT, []),
        ("anthropic", "/messages", kit.MESSAGES, [("anthropic-version", "2023-06-01")]),
        ("ollama", "/api/chat", kit.OLLAMA_CHAT, []),
    ]


def envelope(protocol: str, body: Any, status_type: str) -> str:
    """The message, after checking the envelope is the protocol's own."""
    if protocol == "openai":
        assert set(body["error"]) == {"message", "type", "param", "code", "request_id"}
        assert body["error"]["type"] == status_type
        return str(body["error"]["message"])
    if protocol == "anthropic":
        assert body["type"] == "error" and body["error"]["type"] == status_type
        return str(body["error"]["message"])
    assert set(body) == {"error", "request_id"} and isinstance(body["error"], str)
    return body["error"]


@pytest.mark.parametrize("protocol", ["openai", "anthropic", "ollama"])
async def test_missing_and_invalid_keys_are_401_in_the_callers_envelope(kit: Any, protocol: str) -> None:
    llm = keyed_app(kit)
    _, path, body, headers = next(r for r in requests(kit) if r[0] == protocol)
    async with kit.running(llm):
        missing = await kit.drive(llm, "POST", path, json=body, headers=headers)
        wrong = await kit.drive(
            llm, "POST", path, json=body, headers=[*headers, ("authorization", "Bearer sk-wrong-key")]
        )
    for reply in (missing, wrong):
        assert reply.status == 401
        assert reply.headers["www-authenticate"] == "Bearer"
        assert "sk-wrong-key" not in reply.body.decode()
    assert "Missing API key" in envelope(protocol, missing.json(), "authentication_error")
    assert envelope(protocol, wrong.json(), "authentication_error") == "Invalid API key."
    if protocol == "openai":
        assert missing.json()["error"]["code"] == "invalid_api_key"


@pytest.mark.parametrize(
    "header", [("authorization", f"Bearer {TEAM}"), ("authorization", f"bearer  {TEAM} "), ("x-api-key", TEAM)]
)
async def test_bearer_and_x_api_key_are_accepted(kit: Any, header: tuple[str, str]) -> None:
    llm = keyed_app(kit)
    async with kit.running(llm):
        reply = await kit.drive(llm, "POST", "/chat/completions", json=kit.CHAT, headers=[header])
    assert reply.status == 200 and reply.json()["choices"][0]["message"]["content"] == "Hello there"


async def test_every_route_is_protected_except_the_public_ones(kit: Any) -> None:
    llm = keyed_app(kit)
    async with kit.running(llm):
        assert (await kit.drive(llm, "GET", "/health")).status == 200
        assert (await kit.drive(llm, "GET", "/health/")).status == 200
        for path in ("/models", "/metrics", "/api/tags", "/no/such/route"):
            assert (await kit.drive(llm, "GET", path)).status == 401, path
        assert (await kit.drive(llm, "GET", "/models", headers=[("x-api-key", TEAM)])).status == 200
        assert (await kit.drive(llm, "GET", "/no/such/route", headers=[("x-api-key", TEAM)])).status == 404


async def test_public_paths_come_from_settings(kit: Any) -> None:
    settings = kit.fake_settings(api_keys=KEYS, public_paths=("/health", "/models"))
    llm = LLMApp(pool=kit.fake_pool(settings))
    async with kit.running(llm):
        assert (await kit.drive(llm, "GET", "/models")).status == 200
        assert (await kit.drive(llm, "POST", "/chat/completions", json=kit.CHAT)).status == 401


async def test_keys_are_compared_in_constant_time_against_every_stored_key(
    kit: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr("asgi_llm.middleware.keys.hmac.compare_digest", spy)
    store = KeyStore([(TEAM, KeyInfo("team")), (NARROW, KeyInfo("narrow")), (CLAUDE, KeyInfo("claude"))])
    assert (await store(TEAM)) == KeyInfo("team")  # the first key matches, yet all three are compared
    assert len(calls) == 3
    assert all(len(a) == len(b) == 32 for a, b in calls)  # digests, never the keys themselves
    assert all(TEAM.encode() not in (a, b) for a, b in calls)
    assert (await store("sk-unknown")) is None and len(calls) == 6


async def test_a_keys_model_allow_list_accepts_aliases_and_refuses_others_with_403(kit: Any) -> None:
    llm = keyed_app(kit)
    narrow = [("authorization", f"Bearer {NARROW}")]
    async with kit.running(llm):
        for model in ("default", "fake"):  # the alias it was given, and the model's id
            ok = await kit.drive(llm, "POST", "/chat/completions", json={**kit.CHAT, "model": model}, headers=narrow)
            assert ok.status == 200, model
        ok = await kit.drive(
            llm, "POST", "/api/chat", json={**kit.OLLAMA_CHAT, "model": "default:latest"}, headers=narrow
        )
        assert ok.status == 200 and kit.SlowEngine.generations == 3
        for protocol, path, body, headers in requests(kit):
            refused = await kit.drive(llm, "POST", path, json={**body, "model": "other"}, headers=[*headers, *narrow])
            assert refused.status == 403, protocol
            assert "may not use the model 'other'" in envelope(protocol, refused.json(), "permission_error")
            if protocol == "openai":
                assert refused.json()["error"]["param"] == "model"
    assert kit.SlowEngine.generations == 3  # the refused requests never reached the engine


async def test_a_keys_protocol_allow_list_is_403_elsewhere(kit: Any) -> None:
    llm = keyed_app(kit)
    claude = [("x-api-key", CLAUDE), ("anthropic-version", "2023-06-01")]
    async with kit.running(llm):
        assert (await kit.drive(llm, "POST", "/messages", json=kit.MESSAGES, headers=claude)).status == 200
        refused = await kit.drive(llm, "POST", "/chat/completions", json=kit.CHAT, headers=[("x-api-key", CLAUDE)])
    assert refused.status == 403
    assert refused.json()["error"]["message"] == "This API key may not use the openai API."


async def test_the_body_is_replayed_to_the_app_unchanged() -> None:
    seen: list[dict[str, Any]] = []

    async def echo(scope: Any, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            seen.append(message)
            if not message.get("more_body"):
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"".join(m["body"] for m in seen)})

    app = AuthMiddleware(echo, verify=KeyStore([("k-123", KeyInfo("k", models=frozenset({"m"})))]))
    body = b'{"model": "m", "input": "' + b"x" * 100 + b'"}'
    scope = {"type": "http", "method": "POST", "path": "/x", "root_path": "", "headers": [(b"x-api-key", b"k-123")]}
    chunks = [body[i : i + 7] for i in range(0, len(body), 7)]
    incoming = [{"type": "http.request", "body": c, "more_body": i < len(chunks) - 1} for i, c in enumerate(chunks)]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return incoming.pop(0)

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    assert [m["body"] for m in seen] == chunks and [m["more_body"] for m in seen] == [True] * (len(chunks) - 1) + [
        False
    ]
    assert sent[0]["status"] == 200 and sent[1]["body"] == body


async def test_a_body_too_large_to_check_is_refused_for_allow_listed_keys() -> None:
    called = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        called.append(scope)

    layer = AuthMiddleware(app, verify=KeyStore([("k-123", KeyInfo("k", models=frozenset({"m"})))]), max_body_bytes=10)
    scope = {"type": "http", "method": "POST", "path": "/x", "root_path": "", "headers": [(b"x-api-key", b"k-123")]}
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b'{"model": "m", "pad": "................"}', "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await layer(scope, receive, send)
    assert sent[0]["status"] == 413 and not called


async def test_a_host_verifier_checks_keys_against_its_own_store(kit: Any) -> None:
    users = {"user-token-1": KeyInfo("alice", models=frozenset({"fake"}))}
    seen: list[Any] = []

    async def verify(key: str) -> KeyInfo | None:
        return users.get(key)

    def capture(app: Any) -> Any:
        async def layer(scope: Any, receive: Any, send: Any) -> None:
            seen.append((scope["state"].get(KEY), scope["state"].get(KEY_INFO)))
            await app(scope, receive, send)

        return layer

    llm = LLMApp(
        pool=kit.fake_pool(),
        middleware=[functools.partial(AuthMiddleware, verify=verify), capture],
    )
    async with kit.running(llm):
        ok = await kit.drive(
            llm, "POST", "/chat/completions", json=kit.CHAT, headers=[("authorization", "Bearer user-token-1")]
        )
        bad = await kit.drive(
            llm, "POST", "/chat/completions", json=kit.CHAT, headers=[("authorization", "Bearer nope")]
        )
    assert ok.status == 200 and bad.status == 401
    assert seen == [("alice", users["user-token-1"])]


async def test_configured_keys_and_a_host_verifier_together(kit: Any) -> None:
    async def verify(key: str) -> KeyInfo | None:
        return KeyInfo("host-user") if key == "host-token" else None

    llm = keyed_app(kit, verify=verify)
    async with kit.running(llm):
        for key, status in ((TEAM, 200), ("host-token", 200), ("other", 401)):
            reply = await kit.drive(llm, "POST", "/chat/completions", json=kit.CHAT, headers=[("x-api-key", key)])
            assert reply.status == status, key


async def test_a_failing_verifier_is_a_500_that_leaks_nothing(kit: Any, caplog: pytest.LogCaptureFixture) -> None:
    async def verify(key: str) -> KeyInfo | None:
        raise ConnectionError(f"user store down while checking {key}")

    llm = LLMApp(pool=kit.fake_pool(), verify=verify)
    async with kit.running(llm):
        reply = await kit.drive(
            llm, "POST", "/chat/completions", json=kit.CHAT, headers=[("x-api-key", "sk-leaky-key")]
        )
    assert reply.status == 500 and reply.json()["error"]["code"] == "internal_error"
    assert reply.json()["error"]["message"] == "The server could not check the API key."
    assert "sk-leaky-key" not in reply.body.decode() + caplog.text
    assert "ConnectionError" in caplog.text


async def test_keys_never_reach_logs_errors_or_metrics(kit: Any, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    settings = kit.fake_settings(api_keys=KEYS, usage_log=True)
    llm = LLMApp(pool=kit.fake_pool(settings), adapters=kit.ALL)
    texts = []
    async with kit.running(llm):
        for key in (TEAM, NARROW, CLAUDE, "sk-not-a-key-42"):
            for _, path, body, headers in requests(kit):
                reply = await kit.drive(
                    llm, "POST", path, json={**body, "model": "other"}, headers=[*headers, ("x-api-key", key)]
                )
                texts.append(reply.body.decode())
        texts.append((await kit.drive(llm, "GET", "/metrics", headers=[("x-api-key", TEAM)])).body.decode())
    everything = "\n".join(texts) + caplog.text
    for key in (TEAM, NARROW, CLAUDE, "sk-not-a-key-42"):
        assert key not in everything
    assert "key=team" in caplog.text and 'key="team"' in texts[-1]


async def test_websockets_without_a_key_are_closed_before_the_app_runs() -> None:
    called = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        called.append(scope)

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def receive() -> dict[str, Any]:
        return {"type": "websocket.connect"}

    layer = AuthMiddleware(app, verify=KeyStore([("k-123", KeyInfo("k"))]))
    await layer({"type": "websocket", "path": "/ws", "headers": []}, receive, send)
    assert sent == [{"type": "websocket.close", "code": 1008}] and not called
    await layer({"type": "websocket", "path": "/ws", "headers": [(b"x-api-key", b"k-123")]}, receive, send)
    assert len(called) == 1


async def test_lifespan_passes_through() -> None:
    seen = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append(scope["type"])

    async def noop(*args: Any) -> Any:
        return None

    await AuthMiddleware(app, verify=KeyStore())({"type": "lifespan"}, noop, noop)
    assert seen == ["lifespan"]


async def test_a_client_leaving_while_its_body_is_checked_is_no_413(kit: Any) -> None:
    llm = keyed_app(kit)
    async with kit.running(llm):
        reply = await kit.drive(llm, "POST", "/chat/completions", headers=[("x-api-key", NARROW)], leave_before_body=True)
    assert reply.status is None and not reply.chunks  # the app saw the disconnect and sent nothing
