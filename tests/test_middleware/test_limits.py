"""Per-key limits: 429 with Retry-After before any model work; budgets that survive a restart."""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from asgi_llm import ApiKeyConfig, KeyInfo, LimitsConfig, LLMApp
from asgi_llm.adapters.ollama import OLLAMA
from asgi_llm.core import QuotaExhausted, RateLimited, RetryLater
from asgi_llm.middleware import AuthMiddleware, KeyStore, Ledger, Limiter, Limits, LimitsMiddleware, MemoryBudgets

pytestmark = pytest.mark.anyio

NOON = dt.datetime(2025, 3, 31, 12, 0, tzinfo=dt.UTC).timestamp()
AUTH = [("x-api-key", "sk-limited-123")]


class Clock:
    def __init__(self, now: float = NOON) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def limited_app(kit: Any, limiter: Limiter, **engine_options: Any) -> LLMApp:
    layers = [
        functools.partial(AuthMiddleware, verify=KeyStore([("sk-limited-123", KeyInfo("team"))])),
        functools.partial(LimitsMiddleware, limiter=limiter),
    ]
    return LLMApp(pool=kit.fake_pool(engine=kit.SlowEngine, **engine_options), adapters=kit.ALL, middleware=layers)


def calls(kit: Any) -> list[tuple[str, str, dict[str, Any], list[tuple[str, str]]]]:
    return [
        ("openai", "/chat/completions", kit.CHAT, AUTH),
        ("anthropic", "/messages", kit.MESSAGES, [*AUTH, ("anthropic-version", "2023-06-01")]),
        ("ollama", "/api/chat", kit.OLLAMA_CHAT, AUTH),
    ]


async def test_requests_per_minute_is_429_with_retry_after_in_each_envelope(kit: Any) -> None:
    clock = Clock()
    llm = limited_app(kit, Limiter(Limits(requests_per_minute=2), clock=clock))
    async with kit.running(llm):
        assert (await kit.drive(llm, "POST", "/chat/completions", json=kit.CHAT, headers=AUTH)).status == 200
        clock.now += 10
        assert (await kit.drive(llm, "POST", "/chat/completions", json=kit.CHAT, headers=AUTH)).status == 200
        clock.now += 5
        refused = {p: await kit.drive(llm, "POST", path, json=body, headers=h) for p, path, body, h in calls(kit)}
        assert kit.SlowEngine.generations == 2  # refused before any model work
        clock.now += 45  # the first request leaves the window
        assert (await kit.drive(llm, "POST", "/messages", json=kit.MESSAGES, headers=calls(kit)[1][3])).status == 200
    for reply in refused.values():
        assert reply.status == 429 and reply.headers["retry-after"] == "45"
    ids = {protocol: reply.headers["x-request-id"] for protocol, reply in refused.items()}
    assert refused["openai"].json()["error"] == {
        "message": "Rate limit reached: 2 requests per minute.",
        "type": "rate_limit_error",
        "param": None,
        "code": "rate_limit_exceeded",
        "request_id": ids["openai"],
    }
    assert refused["anthropic"].json() == {
        "type": "error",
        "error": {"type": "rate_limit_error", "message": "Rate limit reached: 2 requests per minute."},
        "request_id": ids["anthropic"],
    }
    assert refused["ollama"].json() == {
        "error": "Rate limit reached: 2 requests per minute.",
        "request_id": ids["ollama"],
    }


async def test_tokens_per_minute_count_real_usage_after_the_fact(kit: Any) -> None:
    clock = Clock()
    llm = limited_app(kit, Limiter(Limits(tokens_per_minute=6), clock=clock))
    async with kit.running(llm):
        assert (
            await kit.drive(llm, "POST", "/chat/completions", json=kit.CHAT, headers=AUTH)
        ).status == 200  # 5 tokens
        clock.now += 20
        assert (await kit.drive(llm, "POST", "/chat/completions", json=kit.CHAT, headers=AUTH)).status == 200  # 10 now
        clock.now += 1
        refused = await kit.drive(llm, "POST", "/chat/completions", json=kit.CHAT, headers=AUTH)
        assert refused.status == 429 and refused.headers["retry-after"] == "39"  # when the first 5 expire
        assert "6 tokens per minute" in refused.json()["error"]["message"]
        clock.now += 39
        assert (await kit.drive(llm, "POST", "/chat/completions", json=kit.CHAT, headers=AUTH)).status == 200


async def test_concurrent_requests_per_key(kit: Any) -> None:
    llm = limited_app(kit, Limiter(Limits(max_concurrent=1)), pieces=tuple("abcdefghij"))
    async with kit.running(llm):
        first = asyncio.create_task(
            kit.drive(llm, "POST", "/chat/completions", json={**kit.CHAT, "stream": True}, headers=AUTH)
        )
        await asyncio.sleep(0.03)
        refused = await kit.drive(llm, "POST", "/chat/completions", json=kit.CHAT, headers=AUTH)
        assert refused.status == 429 and refused.headers["retry-after"] == "1"
        assert "concurrent" in refused.json()["error"]["message"]
        assert (await first).status == 200
        assert (await kit.drive(llm, "POST", "/chat/completions", json=kit.CHAT, headers=AUTH)).status == 200
        leaving = await kit.drive(
            llm, "POST", "/chat/completions", json={**kit.CHAT, "stream": True}, headers=AUTH, leave_after=2
        )
        assert not leaving.complete  # a client that leaves frees its slot too
        assert (await kit.drive(llm, "POST", "/chat/completions", json=kit.CHAT, headers=AUTH)).status == 200


async def test_a_daily_budget_is_kept_in_the_ledger_across_a_restart(kit: Any, tmp_path: Path) -> None:
    path = str(tmp_path / "ledger.sqlite3")
    clock = Clock()
    llm = limited_app(kit, Limiter(Limits(tokens_per_day=10), budgets=Ledger(path), clock=clock))
    async with kit.running(llm):
        for _ in range(2):
            assert (await kit.drive(llm, "POST", "/chat/completions", json=kit.CHAT, headers=AUTH)).status == 200
        spent = await kit.drive(llm, "POST", "/chat/completions", json=kit.CHAT, headers=AUTH)
    assert spent.status == 429 and spent.headers["retry-after"] == str(12 * 3600)  # until UTC midnight
    assert spent.json()["error"]["message"] == "The token budget of 10 tokens per day is spent."

    restarted = limited_app(kit, Limiter(Limits(tokens_per_day=10), budgets=Ledger(path), clock=clock))
    async with kit.running(restarted):
        assert (await kit.drive(restarted, "POST", "/chat/completions", json=kit.CHAT, headers=AUTH)).status == 429
        clock.now += 12 * 3600  # a new UTC day
        assert (await kit.drive(restarted, "POST", "/chat/completions", json=kit.CHAT, headers=AUTH)).status == 200
    assert await Ledger(path).spent("team", 0) == 15


async def test_monthly_and_total_budgets(tmp_path: Path) -> None:
    clock = Clock()
    limiter = Limiter(
        Limits(tokens_per_month=100, tokens_total=150), budgets=Ledger(str(tmp_path / "l.sqlite3")), clock=clock
    )
    limits = limiter.default
    await limiter.charge("k", limits, 100)
    month = await limiter.admit("k", limits)
    assert isinstance(month, RateLimited) and month.retry_after == 12 * 3600  # 31 March noon → 1 April
    clock.now += 86400  # April: the month renews, the total does not
    assert await limiter.admit("k", limits) is None
    limiter.release("k")
    await limiter.charge("k", limits, 50)
    total = await limiter.admit("k", limits)
    assert isinstance(total, QuotaExhausted) and not isinstance(total, RetryLater)  # no Retry-After: it never renews
    assert total.message == (
        "The token budget of 150 tokens in total is spent; it does not renew. "
        "Ask the server's operator for a new budget."
    )


async def test_per_key_limits_from_settings_replace_the_default(kit: Any) -> None:
    keys = (
        ApiKeyConfig(name="small", key=SecretStr("sk-small-1"), limits=LimitsConfig(requests_per_minute=1)),
        ApiKeyConfig(name="big", key=SecretStr("sk-big-1")),
    )
    settings = kit.fake_settings(api_keys=keys, limits=LimitsConfig(requests_per_minute=3))
    api = LLMApp(pool=kit.fake_pool(settings))
    ollama = api.sibling(OLLAMA)  # shares the counters
    async with kit.running(api):
        small, big = [("x-api-key", "sk-small-1")], [("x-api-key", "sk-big-1")]
        assert (await kit.drive(api, "POST", "/chat/completions", json=kit.CHAT, headers=small)).status == 200
        assert (await kit.drive(ollama, "POST", "/api/chat", json=kit.OLLAMA_CHAT, headers=small)).status == 429
        statuses = [
            (await kit.drive(ollama, "POST", "/api/chat", json=kit.OLLAMA_CHAT, headers=big)).status for _ in range(4)
        ]
        assert statuses == [200, 200, 200, 429]
        assert (await kit.drive(api, "GET", "/health")).status == 200  # public paths are never limited


async def test_max_tokens_is_a_default_and_a_ceiling(kit: Any) -> None:
    llm = limited_app(kit, Limiter(Limits(max_tokens=1)))
    async with kit.running(llm):
        capped = await kit.drive(llm, "POST", "/chat/completions", json=kit.CHAT, headers=AUTH)
        assert capped.json()["choices"][0]["message"]["content"] == "Hello"
        assert capped.json()["choices"][0]["finish_reason"] == "length"
        within = await kit.drive(llm, "POST", "/chat/completions", json={**kit.CHAT, "max_tokens": 1}, headers=AUTH)
        assert within.status == 200
        over = await kit.drive(llm, "POST", "/chat/completions", json={**kit.CHAT, "max_tokens": 5}, headers=AUTH)
        assert over.status == 400 and over.json()["error"]["param"] == "max_tokens"
        assert over.json()["error"]["message"] == "'max_tokens' is 5, more than this API key's limit of 1."
        anthropic = await kit.drive(llm, "POST", "/messages", json=kit.MESSAGES, headers=calls(kit)[1][3])
        assert anthropic.status == 400 and anthropic.json()["error"]["type"] == "invalid_request_error"


async def test_limits_work_around_a_plain_asgi_app(kit: Any) -> None:
    async def plain(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    app = LimitsMiddleware(plain, limiter=Limiter(Limits(requests_per_minute=1)))
    assert (await kit.drive(app, "GET", "/x")).body == b"ok"
    refused = await kit.drive(app, "GET", "/x")
    assert refused.status == 429 and refused.json()["error"]["code"] == "rate_limit_exceeded"
    assert (await kit.drive(app, "GET", "/health")).status == 200


async def test_memory_budgets_sum_whole_utc_days() -> None:
    budgets = MemoryBudgets()
    await budgets.charge("k", 5, NOON)
    await budgets.charge("k", 7, NOON - 86400)
    assert await budgets.spent("k", NOON - 12 * 3600) == 5
    assert await budgets.spent("k", 0) == 12 and await budgets.spent("other", 0) == 0
