"""The one policy every `Gate` applies to a key's limits, with no counters of its own: which
limits a key has, the periods its token budgets renew over and what is left of each (read from a
`BudgetStore`), and the refusals — their messages and `Retry-After` — that a spent budget or a
full window gives. `Limiter` (limits.py, one process) and `RedisLimiter` (`asgi_llm.shared`,
shared) both apply it, so a key is refused in the same words whichever counts it.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass
from typing import Literal, Protocol

from asgi_llm.core import LLMError, QuotaExhausted, RateLimited
from asgi_llm.core.policy import KeyInfo, Limits

from .ledger import DAY
from .quota import Quota

__all__ = [
    "Budget",
    "BudgetStore",
    "MemoryBudgets",
    "budgets_left",
    "charges_budgets",
    "limits_for",
    "over_budget",
    "too_many_concurrent",
    "too_many_requests",
    "too_many_tokens",
]

Period = Literal["day", "month", "total"]
_BUDGETS: tuple[tuple[str, Period], ...] = (
    ("tokens_per_day", "day"),
    ("tokens_per_month", "month"),
    ("tokens_total", "total"),
)
_PER: dict[Period, str] = {"day": "per day", "month": "per month", "total": "in total"}


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


@dataclass(frozen=True)
class Budget:
    """One of a key's token budgets, and what is left of it now."""

    name: str
    period: Period
    quota: Quota


def limits_for(identity: KeyInfo | None, default: Limits) -> Limits:
    """A key's own limits, else the default ones."""
    return identity.limits if identity is not None and identity.limits is not None else default


def charges_budgets(limits: Limits) -> bool:
    """Whether a request's tokens count against a budget of these limits."""
    return any(getattr(limits, name) is not None for name, _ in _BUDGETS)


async def budgets_left(store: BudgetStore, key: str, limits: Limits, now: float) -> list[Budget]:
    """What is left of each of the key's budgets at `now`, from what `store` says it spent."""
    found: list[Budget] = []
    for name, period in _BUDGETS:
        budget: int | None = getattr(limits, name)
        if budget is None:
            continue
        start, renews = _period(period, now)
        spent = await store.spent(key, start)
        reset = None if renews is None else renews - now
        found.append(Budget(name, period, Quota(budget, max(budget - spent, 0), reset)))
    return found


def over_budget(budgets: list[Budget]) -> LLMError | None:
    """The refusal for the first spent budget: a 429 to retry when it renews, or, for one that
    never renews, `QuotaExhausted` (no `Retry-After`: waiting will not help)."""
    for budget in budgets:
        if budget.quota.remaining > 0:
            continue
        spent = f"The token budget of {budget.quota.limit} tokens {_PER[budget.period]} is spent"
        if budget.quota.reset is None:
            return QuotaExhausted(f"{spent}; it does not renew. Ask the server's operator for a new budget.")
        return RateLimited(f"{spent}.", retry_after=_wait(budget.quota.reset))
    return None


def too_many_concurrent(limits: Limits) -> RateLimited:
    return RateLimited(f"Too many concurrent requests for this API key (limit {limits.max_concurrent}).", retry_after=1)


def too_many_requests(limits: Limits, wait: float) -> RateLimited:
    """`wait`: seconds until the window admits one more."""
    message = f"Rate limit reached: {limits.requests_per_minute} requests per minute."
    return RateLimited(message, retry_after=_wait(wait))


def too_many_tokens(limits: Limits, wait: float) -> RateLimited:
    """`wait`: seconds until enough of the window's tokens have left it."""
    return RateLimited(f"Rate limit reached: {limits.tokens_per_minute} tokens per minute.", retry_after=_wait(wait))


def _period(period: Period, now: float) -> tuple[float, float | None]:
    """The UTC start of the period holding `now`, and when the next one starts (None: never)."""
    today = dt.datetime.fromtimestamp(now, dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "day":
        return today.timestamp(), today.timestamp() + DAY
    if period == "month":
        start = today.replace(day=1)
        following = (start + dt.timedelta(days=32)).replace(day=1)
        return start.timestamp(), following.timestamp()
    return 0.0, None


def _wait(seconds: float) -> int:
    """Whole seconds to wait, at least one."""
    return max(math.ceil(seconds), 1)
