"""Per-key limits: requests and tokens per minute, concurrent requests, token budgets, max_tokens.

A request over a limit is refused with 429 and `Retry-After`, in the calling protocol's
envelope, before any model work starts; a spent `tokens_total` budget, which never renews,
is a 429 `insufficient_quota` with no `Retry-After` and `x-should-retry: false`. Every answer
to a limited key carries OpenAI's `x-ratelimit-*` headers (see `quota`). Tokens are counted
after the fact, from what the request really used (its `Meter`); budgets are kept in a
`BudgetStore` (the SQLite `Ledger` survives restarts). The counters live in a `Limiter`,
which apps sharing a pool also share.
The layer sees its counters only through the `Gate` protocol: `Limiter` keeps minute windows and
concurrency in this process; `asgi_llm.shared.redis_limits.RedisLimiter` keeps them in Redis, so
N processes admit exactly what one would (budgets in a shared ledger are shared either way).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Protocol

import anyio

from asgi_llm.core import LLMError, QuotaExhausted, RateLimited
from asgi_llm.core.policy import KeyInfo, Limits
from asgi_llm.http.asgi import ASGIApp, Message, Receive, Scope, Send
from asgi_llm.http.context import Classify, meter_of, request_context, request_info, send_error

from .budgets import (
    BudgetStore,
    MemoryBudgets,
    budgets_left,
    charges_budgets,
    limits_for,
    over_budget,
    too_many_concurrent,
    too_many_requests,
    too_many_tokens,
)
from .quota import Quota, quota_headers, tightest

__all__ = ["ANONYMOUS", "Admission", "BudgetStore", "Gate", "Limiter", "LimitsMiddleware", "MemoryBudgets"]

ANONYMOUS = ""
"""The name requests without an authenticated key are counted under."""
MINUTE = 60.0


@dataclass(frozen=True)
class Admission:
    """A request slot taken (no `refusal`) or refused, and the `x-ratelimit-*` headers that say
    what is left of the key's limits (see `quota`)."""

    refusal: LLMError | None
    headers: list[tuple[str, str]]
    lease: str | None = None
    """What a shared backend knows the slot by (its lease), so `leave` frees that one."""


class Gate(Protocol):
    """What the limits layer needs of its counters: take a slot (or say why not), and give it
    back with the tokens the request used. `Limiter` (one process) and `RedisLimiter` (shared),
    both applying the one policy of budgets.py."""

    def limits_for(self, identity: KeyInfo | None) -> Limits: ...

    async def enter(self, key: str, limits: Limits) -> Admission: ...

    async def leave(self, key: str, limits: Limits, admission: Admission, tokens: int) -> None: ...


class Limiter:
    """The counters behind the limits: per key name, in one process."""

    def __init__(
        self,
        default: Limits | None = None,
        *,
        budgets: BudgetStore | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.default = default or Limits()
        self.budgets: BudgetStore = budgets or MemoryBudgets()
        self._clock = clock
        self._requests: dict[str, deque[float]] = {}
        self._tokens: dict[str, deque[tuple[float, int]]] = {}
        self._active: dict[str, int] = {}

    def limits_for(self, identity: KeyInfo | None) -> Limits:
        return limits_for(identity, self.default)

    async def admit(self, key: str, limits: Limits) -> LLMError | None:
        """Takes a request slot, or says why not."""
        return (await self.enter(key, limits)).refusal

    async def enter(self, key: str, limits: Limits) -> Admission:
        """Takes a request slot, or says why not; either way, with what is left. Budgets are
        read first (they may await), then the in-memory checks and the taking happen with no
        await between them."""
        budgets = await budgets_left(self.budgets, key, limits, self._clock())
        now = self._clock()
        refusal = (
            over_budget(budgets)
            or self._over_concurrency(key, limits)
            or self._over_rate(key, limits, now)
            or self._over_tokens(key, limits, now)
        )
        if refusal is None:
            if limits.requests_per_minute is not None:
                self._requests.setdefault(key, deque()).append(now)
            self._active[key] = self._active.get(key, 0) + 1
        tokens = tightest([*self._minute_tokens(key, limits, now), *(b.quota for b in budgets)])
        return Admission(refusal, quota_headers(self._minute_requests(key, limits, now), tokens))

    async def leave(self, key: str, limits: Limits, admission: Admission, tokens: int) -> None:
        """The slot `enter` took is free again; the request's tokens are counted."""
        self.release(key)
        await self.charge(key, limits, tokens)

    def release(self, key: str) -> None:
        self._active[key] -= 1
        if not self._active[key]:
            del self._active[key]

    async def charge(self, key: str, limits: Limits, tokens: int) -> None:
        """Counts what a finished request used against the minute window and the budgets."""
        if tokens <= 0:
            return
        now = self._clock()
        if limits.tokens_per_minute is not None:
            self._tokens.setdefault(key, deque()).append((now, tokens))
        if charges_budgets(limits):
            await self.budgets.charge(key, tokens, now)

    def _minute_requests(self, key: str, limits: Limits, now: float) -> Quota | None:
        """Requests left this minute; whole again when the newest counted one leaves the window."""
        if limits.requests_per_minute is None:
            return None
        window = self._requests.get(key) or deque()
        reset = window[-1] + MINUTE - now if window else 0.0
        return Quota(limits.requests_per_minute, max(limits.requests_per_minute - len(window), 0), reset)

    def _minute_tokens(self, key: str, limits: Limits, now: float) -> list[Quota]:
        if limits.tokens_per_minute is None:
            return []
        window = self._tokens.get(key) or deque()
        used = sum(tokens for at, tokens in window if at > now - MINUTE)
        reset = window[-1][0] + MINUTE - now if window else 0.0
        return [Quota(limits.tokens_per_minute, max(limits.tokens_per_minute - used, 0), max(reset, 0.0))]

    def _over_concurrency(self, key: str, limits: Limits) -> RateLimited | None:
        if limits.max_concurrent is not None and self._active.get(key, 0) >= limits.max_concurrent:
            return too_many_concurrent(limits)
        return None

    def _over_rate(self, key: str, limits: Limits, now: float) -> RateLimited | None:
        window = self._requests.get(key)
        while window and window[0] <= now - MINUTE:
            window.popleft()
        if window is not None and not window:
            del self._requests[key]  # idle keys cost no memory
        if limits.requests_per_minute is None or not window or len(window) < limits.requests_per_minute:
            return None
        oldest = window[len(window) - limits.requests_per_minute]
        return too_many_requests(limits, oldest + MINUTE - now)

    def _over_tokens(self, key: str, limits: Limits, now: float) -> RateLimited | None:
        window = self._tokens.get(key)
        while window and window[0][0] <= now - MINUTE:
            window.popleft()
        if window is not None and not window:
            del self._tokens[key]
        if limits.tokens_per_minute is None or not window:
            return None
        used = sum(tokens for _, tokens in window)
        if used < limits.tokens_per_minute:
            return None
        for at, tokens in window:  # wait until enough of the window has expired
            used -= tokens
            if used < limits.tokens_per_minute:
                break
        return too_many_tokens(limits, at + MINUTE - now)


_NO_RETRY = [("x-should-retry", "false")]
"""Honoured by the OpenAI and Anthropic SDKs, which otherwise retry every 429."""


def _with_headers(send: Send, headers: list[tuple[str, str]]) -> Send:
    if not headers:
        return send
    extra = [(name.encode("latin-1"), value.encode("latin-1")) for name, value in headers]

    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", ()), *extra]}
        await send(message)

    return sending


class LimitsMiddleware:
    """`LimitsMiddleware(app, limiter=Limiter(Limits(requests_per_minute=60), budgets=ledger))`.

    Sits inside the auth layer (it limits by the key's name and the key's own `Limits`);
    `exempt` are paths below the mount it never limits (health probes).
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        limiter: Gate,
        classify: Classify | None = None,
        exempt: Collection[str] = ("/health",),
    ) -> None:
        self.app = app
        self.limiter = limiter
        self._classify = classify
        self._exempt = frozenset("/" + p.strip("/") for p in exempt)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        info = request_info(scope, self._classify) if scope["type"] == "http" else None
        if info is None or info.path in self._exempt:
            await self.app(scope, receive, send)
            return
        context = request_context(scope)
        limits = self.limiter.limits_for(context.key)
        if limits.unlimited:
            await self.app(scope, receive, send)
            return
        key = ANONYMOUS if context.key is None else context.key.name
        admission = await self.limiter.enter(key, limits)
        if admission.refusal is not None:
            spent = isinstance(admission.refusal, QuotaExhausted)
            await send_error(scope, send, info, admission.refusal, [*admission.headers, *(_NO_RETRY if spent else [])])
            return
        send = _with_headers(send, admission.headers)
        if limits.max_tokens is not None:
            context.max_tokens = limits.max_tokens
        meter = meter_of(scope)
        try:
            await self.app(scope, receive, send)
        finally:
            with anyio.CancelScope(shield=True):
                await self.limiter.leave(key, limits, admission, meter.total.total_tokens)
