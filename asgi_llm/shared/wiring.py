"""The shared backends the settings name, made once per app stack: `limits_url` (Redis) and
`state_url` (PostgreSQL), each behind a `Guard` with the settings' timeout and failure policy.

`stack.default_middleware` asks for the ledger, the key store and the gate; `LLMApp` for the
Responses store. Each closes its connections when the pool stops (`ModelPool.stopped`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from asgi_llm.core import StateStore
from asgi_llm.core.policy import Limits
from asgi_llm.middleware.limits import BudgetStore, Gate

from .guard import Guard

if TYPE_CHECKING:
    from .postgres import PostgresDB
    from .postgres_keys import PostgresKeys

__all__ = ["SharedBackends", "database_keys", "shared_store"]

Closers = list[Callable[[], Awaitable[None]]]


def _database(url: str, timeout: float, fail_open: bool) -> PostgresDB:
    from .postgres import PostgresDB  # psycopg only where a database is named

    return PostgresDB(url, Guard("database", timeout=timeout, fail_open=fail_open))


class SharedBackends:
    """What `limits_url` and `state_url` give one middleware stack; `closers` end them."""

    def __init__(
        self,
        *,
        limits_url: str | None,
        state_url: str | None,
        timeout: float,
        fail_open: bool,
        lease_seconds: float,
        closers: Closers,
    ) -> None:
        from .postgres_keys import PostgresKeys
        from .postgres_ledger import PostgresLedger

        self._timeout, self._fail_open, self._lease = timeout, fail_open, lease_seconds
        self._closers = closers
        self._limits_url = limits_url
        self.db = _database(state_url, timeout, fail_open) if state_url else None
        self.ledger = PostgresLedger(self.db) if self.db is not None else None
        self.keys = PostgresKeys(self.db) if self.db is not None else None
        if self.ledger is not None and self.db is not None:
            closers += [self.ledger.aclose, self.db.aclose]

    def gate(self, default: Limits, budgets: BudgetStore | None) -> Gate | None:
        """The Redis gate, its budgets in `budgets` (the ledger) or else in Redis; None without Redis."""
        if self._limits_url is None:
            return None
        from .redis_limits import RedisBudgets, RedisLimiter, redis_client

        redis = redis_client(self._limits_url, self._timeout)
        guard = Guard("rate-limit store", timeout=self._timeout, fail_open=self._fail_open)
        limiter = RedisLimiter(
            redis, default, budgets=budgets or RedisBudgets(redis, guard), guard=guard, lease_seconds=self._lease
        )
        self._closers.append(limiter.aclose)
        return limiter


def shared_store(
    url: str, *, timeout: float, fail_open: bool, max_items: int, max_age: float, closers: Closers
) -> StateStore:
    """Stored Responses in the database at `url`."""
    from .postgres_store import PostgresStore

    db = _database(url, timeout, fail_open)
    closers.append(db.aclose)
    return PostgresStore(db, max_items=max_items, max_age_seconds=max_age)


def database_keys(url: str, timeout: float) -> PostgresKeys:
    """The key table of the database at `url`, for `asgi-llm keys`."""
    from .postgres_keys import PostgresKeys

    return PostgresKeys(_database(url, timeout, fail_open=False))
