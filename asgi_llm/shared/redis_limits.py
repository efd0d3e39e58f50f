"""Minute windows, concurrency and budget counters in Redis, shared by every process.

One Lua script checks a key's concurrency, requests-per-minute and tokens-per-minute and takes
the slot, atomically and on Redis's own clock, so N processes admit exactly the limit. A slot is a
lease: a member of the key's sorted set whose score is when it lapses. This process renews the
leases it holds every third of `lease_seconds`; those of a process that died lapse by themselves.
Tokens charged while Redis is down are kept (bounded) and written once it is back. Keys are
`asgi-llm:{NAME}:*` (one hash tag a key name, so one key's counters share a cluster slot).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
import uuid
from collections import deque
from typing import Any

import anyio
from redis.asyncio import Redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from asgi_llm.core import LLMError, RateLimited
from asgi_llm.core.policy import KeyInfo, Limits
from asgi_llm.middleware.budgets import (
    BudgetStore,
    budgets_left,
    charges_budgets,
    limits_for,
    over_budget,
    too_many_concurrent,
    too_many_requests,
    too_many_tokens,
)
from asgi_llm.middleware.ledger import DAY
from asgi_llm.middleware.limits import Admission
from asgi_llm.middleware.quota import Quota, quota_headers, tightest

from ..support.tasks import spawn
from .guard import Guard

log = logging.getLogger("asgi_llm.shared")

__all__ = ["RedisBudgets", "RedisLimiter", "redis_client"]

_ADMIT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl, maxc, rpm, tpm = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local window = 60000
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - window)
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now - window)
local active = redis.call('ZCARD', KEYS[1])
local nreq = redis.call('ZCARD', KEYS[2])
local used, spent = 0, {}
local toks = redis.call('ZRANGE', KEYS[3], 0, -1, 'WITHSCORES')
for i = 1, #toks, 2 do
  local n = tonumber(string.match(toks[i], ':(%d+)$'))
  used = used + n
  spent[#spent + 1] = {tonumber(toks[i + 1]), n}
end
local verdict, retry = 0, 0
if ARGV[6] == '0' then
  verdict = -1
elseif maxc > 0 and active >= maxc then
  verdict, retry = 1, 1000
elseif rpm > 0 and nreq >= rpm then
  local oldest = redis.call('ZRANGE', KEYS[2], nreq - rpm, nreq - rpm, 'WITHSCORES')
  verdict, retry = 2, tonumber(oldest[2]) + window - now
elseif tpm > 0 and used >= tpm then
  local left = used
  for _, e in ipairs(spent) do
    left = left - e[2]
    if left < tpm then verdict, retry = 3, e[1] + window - now break end
  end
end
if verdict == 0 then
  redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
  redis.call('PEXPIRE', KEYS[1], ttl)
  if rpm > 0 then
    redis.call('ZADD', KEYS[2], now, ARGV[1])
    redis.call('PEXPIRE', KEYS[2], window)
    nreq = nreq + 1
  end
end
local newest_req = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
local newest_tok = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')
return {verdict, retry, nreq, newest_req[2] and (tonumber(newest_req[2]) + window - now) or 0,
        used, newest_tok[2] and (tonumber(newest_tok[2]) + window - now) or 0}
"""
_RENEW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
  redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]))
end
return 0
"""
_CHARGE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], math.min(now, tonumber(ARGV[2])), ARGV[1])
redis.call('PEXPIRE', KEYS[1], 60000)
return 0
"""
_PENDING_MAX = 100_000


def redis_client(url: str, timeout: float) -> Redis:
    """A client whose every wait is bounded; a dropped connection is retried once, on a new one
    (what a restarted Redis needs), with no backoff."""
    client: Redis = Redis.from_url(
        url, socket_timeout=timeout, socket_connect_timeout=timeout, retry=Retry(NoBackoff(), 1)
    )
    return client


def _refusal(verdict: int, limits: Limits, wait: float) -> RateLimited:
    """The script's verdict (1: concurrency, 2: requests, 3: tokens per minute) as the policy words it."""
    if verdict == 1:
        return too_many_concurrent(limits)
    return too_many_requests(limits, wait) if verdict == 2 else too_many_tokens(limits, wait)


def _names(key: str) -> tuple[str, str, str]:
    base = "asgi-llm:{" + key + "}"
    return f"{base}:leases", f"{base}:requests", f"{base}:tokens"


class RedisBudgets:
    """Token budgets as Redis counters: one hash per key, tokens per UTC day (a `BudgetStore`)."""

    def __init__(self, redis: Redis, guard: Guard) -> None:
        self._redis, self._guard = redis, guard

    async def charge(self, key: str, tokens: int, at: float) -> None:
        day = str(int(at // DAY) * DAY)
        await self._guard.call(lambda: self._redis.hincrby("asgi-llm:{" + key + "}:spend", day, tokens))

    async def spent(self, key: str, since: float) -> int:
        days = await self._guard.call(lambda: self._redis.hgetall("asgi-llm:{" + key + "}:spend"))
        return sum(int(tokens) for day, tokens in days.items() if int(day) >= since)


class RedisLimiter:
    """The limits layer's `Gate` on Redis. `budgets` is the PostgreSQL ledger, the SQLite one,
    or `RedisBudgets`; fail closed (a 503) while Redis is down unless its guard fails open."""

    def __init__(
        self, redis: Redis, default: Limits, *, budgets: BudgetStore, guard: Guard, lease_seconds: float = 10.0
    ) -> None:
        self.default = default
        self.budgets = budgets
        self._redis, self._guard = redis, guard
        self._admit_script = redis.register_script(_ADMIT)  # sent once, then called by its SHA
        self._ttl = max(int(lease_seconds * 1000), 100)
        self._held: dict[str, str] = {}  # lease -> its sorted set
        self._pending: deque[tuple[bool, str, int, float]] = deque(maxlen=_PENDING_MAX)  # (budget?, key, tokens, at)
        self._renewer: asyncio.Task[None] | None = None
        self._flushing = anyio.Lock()  # one writer of the pending charges: none written twice

    def limits_for(self, identity: KeyInfo | None) -> Limits:
        return limits_for(identity, self.default)

    async def enter(self, key: str, limits: Limits) -> Admission:
        try:
            await self._flush()
            budgets = await budgets_left(self.budgets, key, limits, time.time())
            spent = over_budget(budgets)
            lease = uuid.uuid4().hex
            found = await self._guard.call(lambda: self._admit(key, limits, lease, take=spent is None))
        except LLMError as exc:  # the guard's BackendDown (Redis), or the ledger's (PostgreSQL)
            return Admission(None if self._guard.fail_open else exc, [])
        verdict, retry, requests, requests_reset, tokens, tokens_reset = (int(v) for v in found)
        refusal = spent if spent is not None or not verdict else _refusal(verdict, limits, retry / 1000)
        if refusal is None:
            self._hold(lease, _names(key)[0])
        quotas = [*self._minute_tokens(limits, tokens, tokens_reset), *(b.quota for b in budgets)]
        minute = None
        if limits.requests_per_minute is not None:
            left = max(limits.requests_per_minute - requests, 0)
            minute = Quota(limits.requests_per_minute, left, max(requests_reset, 0) / 1000)
        headers = quota_headers(minute, tightest(quotas))
        return Admission(refusal, headers, lease if refusal is None else None)

    async def leave(self, key: str, limits: Limits, admission: Admission, tokens: int) -> None:
        if admission.lease is not None:
            self._held.pop(admission.lease, None)
            with contextlib.suppress(Exception):  # unreachable: the lease lapses by itself
                await self._free(key, admission.lease)
        if tokens <= 0:
            return
        now = time.time()
        if limits.tokens_per_minute is not None:
            self._pending.append((False, key, tokens, now))
        if charges_budgets(limits):
            self._pending.append((True, key, tokens, now))
        with contextlib.suppress(LLMError):  # kept, and written once the store is back
            await self._flush()

    async def aclose(self) -> None:
        """Stop renewing leases and write the pending charges; the client is its owner's to close
        (the pool's `Clients`, after this)."""
        if self._renewer is not None:
            self._renewer.cancel()
            with contextlib.suppress(BaseException):
                await self._renewer
            self._renewer = None
        with contextlib.suppress(Exception):
            await self._guard.call(self._flush)

    async def _admit(self, key: str, limits: Limits, lease: str, *, take: bool) -> list[Any]:
        def arg(value: int | None) -> int:
            return 0 if value is None else value

        limit = (arg(limits.max_concurrent), arg(limits.requests_per_minute), arg(limits.tokens_per_minute))
        result: list[Any] = await self._admit_script(keys=_names(key), args=[lease, self._ttl, *limit, int(take)])
        return result

    async def _free(self, key: str, lease: str) -> None:
        await self._guard.call(lambda: self._redis.zrem(_names(key)[0], lease))

    async def _flush(self) -> None:
        """Writes the tokens charged, and those charged while the store was away (at their own time)."""
        async with self._flushing:
            while self._pending:
                budget, key, tokens, at = self._pending[0]
                if budget:
                    await self.budgets.charge(key, tokens, at)
                else:
                    member, when = f"{uuid.uuid4().hex}:{tokens}", int(at * 1000)
                    charge = functools.partial(self._redis.eval, _CHARGE, 1, _names(key)[2], member, when)
                    await self._guard.call(charge)
                self._pending.popleft()

    def _hold(self, lease: str, leases: str) -> None:
        self._held[lease] = leases
        if self._renewer is None or self._renewer.done():
            # a task outliving the request that starts it, shared by every request (ARCHITECTURE.md)
            self._renewer = spawn(self._renew(), name="redis lease renewal", log=log)

    async def _renew(self) -> None:
        """Every third of a lease, the leases this process holds are extended; once none are
        held, the task ends (the next slot taken starts another)."""
        while self._held:
            await asyncio.sleep(self._ttl / 3000)
            with contextlib.suppress(Exception):  # Redis away: the next round tries again
                await self._guard.call(functools.partial(self._extend, list(self._held.items())))

    async def _extend(self, held: list[tuple[str, str]]) -> None:
        async with self._redis.pipeline(transaction=False) as pipe:
            for lease, leases in held:
                pipe.eval(_RENEW, 1, leases, lease, self._ttl)
            await pipe.execute()

    @staticmethod
    def _minute_tokens(limits: Limits, used: int, reset: int) -> list[Quota]:
        if limits.tokens_per_minute is None:
            return []
        return [Quota(limits.tokens_per_minute, max(limits.tokens_per_minute - used, 0), max(reset, 0) / 1000)]
