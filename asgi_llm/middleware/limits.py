"""Per-key limits: requests and tokens per minute, concurrent requests, token budgets, max_tokens.

A request over a limit is refused with 429 and `Retry-After`, in the calling protocol's
envelope, before any model work starts. Tokens are counted after the fact, from what the
request really used (its `Meter`); budgets are kept in a `BudgetStore` (the SQLite `Ledger`
survives restarts). The counters live in a `Limiter`, which apps sharing a pool also share.
Minute windows and concurrency are per process; budgets in a shared ledger are not.
"""

from __future__ import annotations

import datetime as dt
import math
import time
from collections import deque
from collections.abc import Callable, Collection
from typing import Protocol

import anyio

from asgi_llm.http.asgi import ASGIApp, Receive, Scope, Send
from asgi_llm.core import RateLimited

from asgi_llm.http.context import KEY, KEY_INFO, MAX_TOKENS, Classify, meter_of, request_info, request_state, send_error
from .ledger import DAY
from .policy import KeyInfo, Limits

__all__ = ["ANONYMOUS", "BudgetStore", "Limiter", "LimitsMiddleware", "MemoryBudgets"]

ANONYMOUS = ""
"""The name requests without an authenticated key are counted under."""
MINUTE = 60.0


class BudgetStore(Protocol):
    async def charge(self, key: str, tokens: int, at: float) -> None: ...

    async def spent(self, key: str, since: float) -> int:
        """Tokens charged to `key` on UTC days starting at or after `since`."""
        ...


class MemoryBudgets:
    """Budgets in memory (lost on restart); for tests and for when no ledger is configured."""

    def __init__(self) -> None:
        self._days: dict[str, dict[int, int]] = {}

    async def charge(self, key: str, tokens: int, at: float) -> None:
        days = self._days.setdefault(key, {})
        day = int(at // DAY) * DAY
        days[day] = days.get(day, 0) + tokens

    async def spent(self, key: str, since: float) -> int:
        return sum(tokens for day, tokens in self._days.get(key, {}).items() if day >= since)


def _period(period: str, now: float) -> tuple[float, float | None]:
    """The UTC start of the period holding `now`, and when the next one starts (None: never)."""
    today = dt.datetime.fromtimestamp(now, dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "day":
        return today.timestamp(), today.timestamp() + DAY
    if period == "month":
        start = today.replace(day=1)
        following = (start + dt.timedelta(days=32)).replace(day=1)
        return start.timestamp(), following.timestamp()
    return 0.0, None


_BUDGETS = (("tokens_per_day", "day"), ("tokens_per_month", "month"), ("tokens_total", "total"))
_PER = {"day": "per day", "month": "per month", "total": "in total"}
TOTAL_RETRY_AFTER = DAY
"""`Retry-After` for a spent total budget, which never renews by itself."""


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
        return identity.limits if identity is not None and identity.limits is not None else self.default

    async def admit(self, key: str, limits: Limits) -> RateLimited | None:
        """Takes a request slot, or says why not. Budgets are read first (they may await), then
        the in-memory checks and the taking happen with no await between them."""
        refusal = await self._over_budget(key, limits)
        if refusal is not None:
            return refusal
        now = self._clock()
        refusal = (
            self._over_concurrency(key, limits)
            or self._over_rate(key, limits, now)
            or self._over_tokens(key, limits, now)
        )
        if refusal is not None:
            return refusal
        if limits.requests_per_minute is not None:
            self._requests.setdefault(key, deque()).append(now)
        self._active[key] = self._active.get(key, 0) + 1
        return None

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
        if any(getattr(limits, name) is not None for name, _ in _BUDGETS):
            await self.budgets.charge(key, tokens, now)

    async def _over_budget(self, key: str, limits: Limits) -> RateLimited | None:
        for name, period in _BUDGETS:
            budget: int | None = getattr(limits, name)
            if budget is None:
                continue
            now = self._clock()
            start, renews = _period(period, now)
            if await self.budgets.spent(key, start) >= budget:
                wait = TOTAL_RETRY_AFTER if renews is None else math.ceil(renews - now)
                return RateLimited(
                    f"The token budget of {budget} tokens {_PER[period]} is spent.", retry_after=_wait(wait)
                )
        return None

    def _over_concurrency(self, key: str, limits: Limits) -> RateLimited | None:
        if limits.max_concurrent is not None and self._active.get(key, 0) >= limits.max_concurrent:
            return RateLimited(
                f"Too many concurrent requests for this API key (limit {limits.max_concurrent}).", retry_after=1
            )
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
        return RateLimited(
            f"Rate limit reached: {limits.requests_per_minute} requests per minute.",
            retry_after=_wait(oldest + MINUTE - now),
        )

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
        return RateLimited(
            f"Rate limit reached: {limits.tokens_per_minute} tokens per minute.", retry_after=_wait(at + MINUTE - now)
        )


def _wait(seconds: float) -> int:
    return max(math.ceil(seconds), 1)


class LimitsMiddleware:
    """`LimitsMiddleware(app, limiter=Limiter(Limits(requests_per_minute=60), budgets=ledger))`.

    Sits inside the auth layer (it limits by the key's name and the key's own `Limits`);
    `exempt` are paths below the mount it never limits (health probes).
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        limiter: Limiter,
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
        state = request_state(scope)
        limits = self.limiter.limits_for(state.get(KEY_INFO))
        if limits.unlimited:
            await self.app(scope, receive, send)
            return
        key: str = state.get(KEY) or ANONYMOUS
        refusal = await self.limiter.admit(key, limits)
        if refusal is not None:
            await send_error(scope, send, info, refusal)
            return
        if limits.max_tokens is not None:
            state[MAX_TOKENS] = limits.max_tokens
        meter = meter_of(scope)
        try:
            await self.app(scope, receive, send)
        finally:
            self.limiter.release(key)
            with anyio.CancelScope(shield=True):
                await self.limiter.charge(key, limits, meter.total.total_tokens)
