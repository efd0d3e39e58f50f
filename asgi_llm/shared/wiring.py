"""The shared backends the settings name: `limits_url` (Redis) and `state_url` (PostgreSQL),
each behind a `Guard` with the settings' timeout and failure policy.

`stack.default_middleware` asks for the ledger, the key store and the gate; `LLMApp` for the
Responses store. Their clients are the pool's `Clients`: one Redis client and one PostgreSQL
pool a URL, however many stacks and stores ask, closed by the app's lifespan once the pool has
stopped with its last user (support/clients.py); what is built on them closes first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from asgi_llm.core import StateStore
from asgi_llm.core.policy import Limits
from asgi_llm.middleware.limits import BudgetStore, Gate
from asgi_llm.support.clients import Clients

from .guard import Guard

if TYPE_CHECKING:
    from redis.asyncio import Redis

    from .postgres import PostgresDB
    from .postgres_keys import PostgresKeys

__all__ = ["SharedBackends", "database", "database_keys", "shared_store"]


def database(clients: Clients, url: str, timeout: float, fail_open: bool) -> PostgresDB:
    """The one `PostgresDB` (one psycopg pool, opened on first use) of the database at `url`."""
    from .postgres import PostgresDB  # psycopg only where a database is named

    def made() -> PostgresDB:
        return PostgresDB(url, Guard("database", timeout=timeout, fail_open=fail_open))

    return clients.get("postgresql", url, made, lambda db: db.aclose)


def _redis(clients: Clients, url: str, timeout: float) -> Redis:
    from .redis_limits import redis_client  # redis only where a Redis is named

    return clients.get("redis", url, lambda: redis_client(url, timeout), lambda redis: redis.aclose)


class SharedBackends:
    """What `limits_url` and `state_url` give one middleware stack, on the pool's `clients`."""

    def __init__(
        self,
        *,
        limits_url: str | None,
        state_url: str | None,
        timeout: float,
        fail_open: bool,
        lease_seconds: float,
        clients: Clients,
    ) -> None:
        from .postgres_keys import PostgresKeys
        from .postgres_ledger import PostgresLedger

        self._timeout, self._fail_open, self._lease = timeout, fail_open, lease_seconds
        self._clients = clients
        self._limits_url = limits_url
        self.db = database(clients, state_url, timeout, fail_open) if state_url else None
        self.ledger = PostgresLedger(self.db) if self.db is not None else None
        self.keys = PostgresKeys(self.db) if self.db is not None else None
        if self.ledger is not None:
            clients.on_close(self.ledger.aclose)  # its unwritten records, before the database closes

    def gate(self, default: Limits, budgets: BudgetStore | None) -> Gate | None:
        """The Redis gate, its budgets in `budgets` (the ledger) or else in Redis; None without Redis."""
        if self._limits_url is None:
            return None
        from .redis_limits import RedisBudgets, RedisLimiter

        redis = _redis(self._clients, self._limits_url, self._timeout)
        guard = Guard("rate-limit store", timeout=self._timeout, fail_open=self._fail_open)
        limiter = RedisLimiter(
            redis, default, budgets=budgets or RedisBudgets(redis, guard), guard=guard, lease_seconds=self._lease
        )
        self._clients.on_close(limiter.aclose)  # its leases and pending charges, before Redis closes
        return limiter


def shared_store(
    clients: Clients, url: str, *, timeout: float, fail_open: bool, max_items: int, max_age: float
) -> StateStore:
    """Stored Responses in the database at `url`."""
    from .postgres_store import PostgresStore

    db = database(clients, url, timeout, fail_open)
    return PostgresStore(db, max_items=max_items, max_age_seconds=max_age)


def database_keys(url: str, timeout: float) -> PostgresKeys:
    """The key table of the database at `url`, for `asgi-llm keys` (no event loop, no pool)."""
    from .postgres import PostgresDB
    from .postgres_keys import PostgresKeys

    return PostgresKeys(PostgresDB(url, Guard("database", timeout=timeout, fail_open=False)))
