"""Shared backends that do not answer (nothing listens on their ports): every request that needs
one ends within the bound with a 503 in its own protocol's envelope, naming the store but never
its address."""

from __future__ import annotations

import socket
import time
from typing import Any

import pytest

from asgi_llm import LLMApp
from asgi_llm.shared.wiring import shared_store

pytestmark = pytest.mark.anyio


def _nowhere() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_an_unreachable_key_store_is_a_503_in_each_protocol(kit: Any) -> None:
    settings = kit.fake_settings(state_url=f"postgresql://llm:secret@127.0.0.1:{_nowhere()}/llm", backend_timeout=0.5)
    llm = LLMApp(pool=kit.fake_pool(settings), adapters=kit.ALL)
    async with kit.running(llm):
        started = time.monotonic()
        openai = await kit.drive(
            llm, "POST", "/chat/completions", json=kit.CHAT, headers=[("authorization", "Bearer sk-llm-x")]
        )
        anthropic = await kit.drive(llm, "POST", "/messages", json=kit.MESSAGES, headers=[("x-api-key", "sk-llm-x")])
        assert time.monotonic() - started < 3
    assert openai.status == 503 and openai.json()["error"]["code"] == "service_unavailable"
    assert dict(openai.headers)["retry-after"] == "1"
    assert "key store is unreachable" in openai.json()["error"]["message"] and b"secret" not in openai.body
    assert anthropic.status == 503 and anthropic.json()["error"]["type"] == "overloaded_error"


async def test_an_unreachable_responses_store_is_a_503(kit: Any) -> None:
    pool = kit.fake_pool()
    url = f"postgresql://llm@127.0.0.1:{_nowhere()}/llm"
    store = shared_store(pool.clients, url, timeout=0.5, fail_open=False, max_items=10, max_age=60)
    llm = LLMApp(pool=pool, store=store, middleware=())
    async with kit.running(llm):
        stored = await kit.drive(llm, "POST", "/responses", json={"model": "fake", "input": "hi"})
        fetched = await kit.drive(llm, "GET", "/responses/resp_123")
    assert stored.status == 503 and stored.json()["error"]["code"] == "service_unavailable"
    assert fetched.status == 503 and "database is unreachable" in fetched.json()["error"]["message"]
