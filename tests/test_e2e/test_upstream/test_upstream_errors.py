"""Upstream failures, over real HTTP, as each protocol's own errors: the status kept where it is the
client's (400, 429 with its Retry-After), 502 where the upstream failed, 503 where it cannot be
reached; the upstream's key (which a careless upstream echoes back) never reaches the client.

The upstream here is a small scripted server that fails on purpose: real servers do not
rate-limit or crash on request."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from asgi_llm import ModelConfig, Settings

KEY = "sk-upstream-secret-0123456789"
HI = [{"role": "user", "content": "hi"}]
seen_keys: list[str] = []


async def chat(request: Request) -> Response:
    body = await request.json()
    auth = request.headers.get("authorization", "")
    seen_keys.append(auth)
    model = body["model"]
    if model == "limited":
        return JSONResponse(
            {"error": {"message": f"slow down ({auth})", "type": "rate_limit"}}, 429, {"retry-after": "7"}
        )
    if model == "picky":
        return JSONResponse({"error": {"message": f"max_tokens is too large for {auth}", "param": "max_tokens"}}, 400)
    if model == "locked":
        return JSONResponse({"error": {"message": f"bad key {auth}"}}, 401)
    if model == "cut":
        return StreamingResponse(_cut_stream(), media_type="text/event-stream")
    return JSONResponse({"error": {"message": f"internal failure, key {auth}"}}, 500)


async def _cut_stream() -> AsyncIterator[bytes]:
    chunk = {"choices": [{"index": 0, "delta": {"content": "Hel"}, "finish_reason": None}]}
    yield f"data: {json.dumps(chunk)}\n\n".encode()
    await asyncio.sleep(0.05)
    yield b'data: {"error": {"message": "the GPU fell over"}}\n\n'


async def models(request: Request) -> JSONResponse:
    return JSONResponse({"object": "list", "data": [{"id": "limited"}]})


@pytest.fixture(scope="module")
def gateway(
    monkeypatch_module: pytest.MonkeyPatch, serve_app: Any, serve_gateway: Any, unused_port: Any
) -> Iterator[str]:
    monkeypatch_module.setenv("TEST_UPSTREAM_KEY", KEY)
    upstream = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"]), Route("/v1/models", models)])
    with serve_app(upstream) as base:
        names = ("limited", "picky", "locked", "broken", "cut")
        configs = [ModelConfig(id=n, base_url=f"{base}/v1", api_key_env="TEST_UPSTREAM_KEY") for n in names]
        configs.append(ModelConfig(id="down", base_url=f"http://127.0.0.1:{unused_port()}/v1", connect_timeout=2))
        with_login = base.replace("http://", "http://gw:pw-in-url@")
        configs.append(ModelConfig(id="login", base_url=f"{with_login}/v1", upstream_model="broken"))
        with serve_gateway(Settings(models=tuple(configs))) as url:
            yield url


@pytest.fixture(scope="module")
def monkeypatch_module() -> Iterator[pytest.MonkeyPatch]:
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def post(url: str, model: str, **extra: Any) -> httpx.Response:
    body = {"model": model, "messages": HI, "max_tokens": 4, **extra}
    return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=30)


def test_a_rate_limit_keeps_its_status_and_retry_after(gateway: str) -> None:
    reply = post(gateway, "limited")
    assert reply.status_code == 429 and reply.headers["retry-after"] == "7"
    assert reply.json()["error"]["type"] == "rate_limit_error"
    with (
        openai.OpenAI(base_url=f"{gateway}/v1", api_key="client-key", max_retries=0) as sdk,
        pytest.raises(openai.RateLimitError) as caught,
    ):
        sdk.chat.completions.create(model="limited", messages=HI, max_tokens=4)  # type: ignore[arg-type]
    assert caught.value.response.headers["retry-after"] == "7"
    with (
        anthropic.Anthropic(base_url=gateway, api_key="client-key", max_retries=0) as claude,
        pytest.raises(anthropic.RateLimitError),
    ):
        claude.messages.create(model="limited", max_tokens=4, messages=HI)  # type: ignore[arg-type]
    assert f"Bearer {KEY}" in seen_keys and not any("client-key" in k for k in seen_keys)  # ours went, not the client's


def test_a_bad_request_stays_the_clients_with_the_upstreams_words(gateway: str) -> None:
    reply = post(gateway, "picky")
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert error["param"] == "max_tokens" and "too large" in error["message"]


@pytest.mark.parametrize(("model", "status"), [("broken", 502), ("locked", 502), ("down", 503)])
def test_upstream_failures_are_gateway_errors(gateway: str, model: str, status: int) -> None:
    for reply in (post(gateway, model), post(gateway, model, stream=True)):
        assert reply.status_code == status
        assert reply.json()["error"]["type"] == "server_error"
    ollama = httpx.post(f"{gateway}/api/chat", json={"model": model, "messages": HI, "stream": False}, timeout=30)
    assert ollama.status_code == status and "error" in ollama.json()
    if status == 503:
        assert ollama.headers["retry-after"]


def test_no_reply_carries_the_upstream_key_or_address(gateway: str) -> None:
    for model in ("limited", "picky", "locked", "broken", "down"):
        for reply in (
            post(gateway, model),
            httpx.post(f"{gateway}/v1/messages", json={"model": model, "max_tokens": 4, "messages": HI}, timeout=30),
        ):
            assert reply.status_code >= 400
            assert KEY not in reply.text and "127.0.0.1" not in reply.text
    health = httpx.get(f"{gateway}/v1/health", timeout=10).text
    assert KEY not in health and "127.0.0.1" not in health


def test_a_failure_mid_stream_ends_the_stream_with_an_error_event(gateway: str) -> None:
    with httpx.stream(
        "POST", f"{gateway}/v1/chat/completions", json={"model": "cut", "messages": HI, "stream": True}, timeout=30
    ) as reply:
        assert reply.status_code == 200  # the first token had gone out
        text = reply.read().decode()
    assert '"Hel"' in text and "the GPU fell over" in text and '"error"' in text


def test_credentials_in_a_base_url_go_as_basic_auth_and_are_never_shown(gateway: str) -> None:
    reply = post(gateway, "login")
    assert reply.status_code == 502 and "pw-in-url" not in reply.text
    assert "Basic Z3c6cHctaW4tdXJs" in seen_keys  # gw:pw-in-url
    assert "pw-in-url" not in httpx.get(f"{gateway}/v1/health", timeout=10).text
