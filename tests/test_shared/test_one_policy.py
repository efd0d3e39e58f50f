"""The Redis gate and the in-process `Limiter` apply one policy (middleware/budgets.py): a key
over the same limit is refused with the same error, words and `Retry-After` by either, and a
spent budget the same way, against the real Redis server."""

from __future__ import annotations

import uuid

import pytest

from asgi_llm.core import LLMError, RateLimited
from asgi_llm.core.policy import Limits
from asgi_llm.middleware.budgets import MemoryBudgets
from asgi_llm.middleware.limits import Gate, Limiter
from asgi_llm.shared.guard import Guard
from asgi_llm.shared.redis_limits import RedisLimiter, redis_client

from .servers import RedisServer

pytestmark = pytest.mark.anyio

CASES = {
    "concurrency": (Limits(max_concurrent=1), 0),
    "requests": (Limits(requests_per_minute=1), 0),
    "tokens": (Limits(tokens_per_minute=5), 10),
    "day": (Limits(tokens_per_day=5), 10),
    "total": (Limits(tokens_total=5), 10),
}


async def _second_refusal(gate: Gate, limits: Limits, tokens: int) -> LLMError | None:
    """The refusal a key gets on its second request, the first still held (or done, having used `tokens`)."""
    key = uuid.uuid4().hex
    first = await gate.enter(key, limits)
    assert first.refusal is None
    if tokens:
        await gate.leave(key, limits, first, tokens)
    return (await gate.enter(key, limits)).refusal


@pytest.mark.parametrize("case", CASES)
async def test_both_gates_refuse_in_the_same_words(redis_server: RedisServer, case: str) -> None:
    limits, tokens = CASES[case]
    guard = Guard("rate-limit store", timeout=5.0, fail_open=False)
    client = redis_client(redis_server.url, 5.0)
    shared = RedisLimiter(client, Limits(), budgets=MemoryBudgets(), guard=guard)
    try:
        by_redis = await _second_refusal(shared, limits, tokens)
    finally:
        await shared.aclose()
        await client.aclose()
    alone = await _second_refusal(Limiter(Limits()), limits, tokens)
    assert by_redis is not None and alone is not None
    assert type(by_redis) is type(alone)
    assert (by_redis.message, by_redis.status, by_redis.param) == (alone.message, alone.status, alone.param)
    if isinstance(by_redis, RateLimited) and isinstance(alone, RateLimited):  # read a moment apart: a second's leeway
        assert abs(by_redis.retry_after - alone.retry_after) <= 1
