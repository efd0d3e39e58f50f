"""OpenAI's `x-ratelimit-*` headers on every answer to a limited key, and a lifetime budget's
429 that does not ask the client to come back later."""

from __future__ import annotations

import datetime as dt
import functools
from typing import Any

import pytest

from asgi_llm import KeyInfo, LLMApp
from asgi_llm.middleware import AuthMiddleware, KeyStore, Limiter, Limits, LimitsMiddleware
from asgi_llm.middleware.quota import duration

pytestmark = pytest.mark.anyio

NOON = dt.datetime(2025, 3, 31, 12, 0, tzinfo=dt.UTC).timestamp()
AUTH = [("x-api-key", "sk-limited-123")]
UNLIMITED = [("x-api-key", "sk-free-123")]
PER_REQUEST = 5  # the fake engine's 3 prompt and 2 completion tokens


class Clock:
    def __init__(self, now: float = NOON) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def limited_app(kit: Any, limits: Limits, clock: Clock) -> LLMApp:
    keys = KeyStore([("sk-limited-123", KeyInfo("team", limits=limits)), ("sk-free-123", KeyInfo("free"))])
    layers = [
        functools.partial(AuthMiddleware, verify=keys),
        functools.partial(LimitsMiddleware, limiter=Limiter(budgets=None, clock=clock)),
    ]
    return LLMApp(pool=kit.fake_pool(engine=kit.SlowEngine), adapters=kit.ALL, middleware=layers)


def ratelimit(reply: Any) -> dict[str, str]:
    return {k.removeprefix("x-ratelimit-"): v for k, v in reply.headers.items() if k.startswith("x-ratelimit-")}


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (0.02, "20ms"), (1, "1s"), (1.5, "1.5s"), (59.9996, "1m0s"), (360, "6m0s"), (86399, "23h59m59s")],
)
def test_durations_read_as_openais_do(seconds: float, text: str) -> None:
    assert duration(seconds) == text


async def test_headers_count_down_on_200s_streamed_or_not_and_on_the_429(kit: Any) -> None:
    clock = Clock()
    llm = limited_app(kit, Limits(requests_per_minute=3, tokens_per_minute=100), clock)
    async with kit.running(llm):
        first = await kit.drive(llm, "POST", "/chat/completions", json=kit.CHAT, headers=AUTH)
        clock.now += 10
        streamed = await kit.drive(llm, "POST", "/chat/completions", json={**kit.CHAT, "stream": True}, headers=AUTH)
        clock.now += 5
        third = await kit.drive(llm, "POST", "/api/chat", json=kit.OLLAMA_CHAT, headers=AUTH)
        refused = await kit.drive(llm, "POST", "/chat/completions", json=kit.CHAT, headers=AUTH)
    assert [r.status for r in (first, streamed, third, refused)] == [200, 200, 200, 429]
    assert ratelimit(first) == {
        "limit-requests": "3",
        "remaining-requests": "2",
        "reset-requests": "1m0s",
        "limit-tokens": "100",
        "remaining-tokens": "100",  # nothing used yet: tokens count once a request is done
        "reset-tokens": "0s",
    }
    assert ratelimit(streamed) == {
        "limit-requests": "3",
        "remaining-requests": "1",
        "reset-requests": "1m0s",
        "limit-tokens": "100",
        "remaining-tokens": str(100 - PER_REQUEST),
        "reset-tokens": "50s",  # the first request's tokens leave the window 60 s after it ended
    }
    assert ratelimit(third)["remaining-requests"] == "0" and ratelimit(third)["remaining-tokens"] == "90"
    assert ratelimit(refused) == {**ratelimit(third), "remaining-tokens": "85", "reset-tokens": "1m0s"}
    assert refused.headers["retry-after"] == "45"  # the first request leaves the window


async def test_keys_without_limits_get_no_headers(kit: Any) -> None:
    llm = limited_app(kit, Limits(requests_per_minute=3), Clock())
    async with kit.running(llm):
        reply = await kit.drive(llm, "POST", "/chat/completions", json=kit.CHAT, headers=UNLIMITED)
    assert reply.status == 200 and ratelimit(reply) == {}


async def test_the_tokens_headers_follow_the_budget_with_least_left(kit: Any) -> None:
    clock = Clock()
    llm = limited_app(kit, Limits(tokens_per_minute=1000, tokens_per_day=12), clock)
    async with kit.running(llm):
        replies = [await kit.drive(llm, "POST", "/chat/completions", json=kit.CHAT, headers=AUTH) for _ in range(4)]
    assert [r.status for r in replies] == [200, 200, 200, 429]
    assert [ratelimit(r)["remaining-tokens"] for r in replies] == ["12", "7", "2", "0"]
    assert {ratelimit(r)["limit-tokens"] for r in replies} == {"12"}
    assert ratelimit(replies[3])["reset-tokens"] == "12h0m0s"  # noon: the day renews at midnight UTC
    assert replies[3].headers["retry-after"] == str(12 * 3600)
    assert "x-should-retry" not in replies[3].headers


@pytest.mark.parametrize("protocol", ["openai", "anthropic", "ollama"])
async def test_a_spent_lifetime_budget_says_so_and_asks_for_no_retry(kit: Any, protocol: str) -> None:
    path, body, extra = {
        "openai": ("/chat/completions", kit.CHAT, []),
        "anthropic": ("/messages", kit.MESSAGES, [("anthropic-version", "2023-06-01")]),
        "ollama": ("/api/chat", kit.OLLAMA_CHAT, []),
    }[protocol]
    llm = limited_app(kit, Limits(tokens_total=5), Clock())
    async with kit.running(llm):
        spent = await kit.drive(llm, "POST", path, json=body, headers=[*AUTH, *extra])
        refused = await kit.drive(llm, "POST", path, json=body, headers=[*AUTH, *extra])
    assert spent.status == 200 and refused.status == 429
    assert "retry-after" not in refused.headers and refused.headers["x-should-retry"] == "false"
    assert ratelimit(refused) == {"limit-tokens": "5", "remaining-tokens": "0"}  # no reset: it never renews
    message = "The token budget of 5 tokens in total is spent; it does not renew. "
    message += "Ask the server's operator for a new budget."
    answer = refused.json()
    if protocol == "openai":
        assert answer["error"]["message"] == message
        assert answer["error"]["type"] == answer["error"]["code"] == "insufficient_quota"
    elif protocol == "anthropic":
        assert answer["error"] == {"type": "rate_limit_error", "message": message}
    else:
        assert answer["error"] == message
    assert "tomorrow" not in refused.body.decode()
