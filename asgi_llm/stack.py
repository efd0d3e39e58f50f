"""The default middleware stack an `LLMApp` is built with, from its pool's settings, outermost
first: tracing → usage → auth → limits → metrics → admin. Each layer is a factory (`Layer`) taking the app
inside; their shared state (the ledger, the metrics, the key verifier) is made here once.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from .config import ApiKeyConfig, LimitsConfig, Settings
from .http.asgi import ASGIApp
from .middleware import (
    AuthMiddleware,
    JSONLinesSink,
    KeyInfo,
    KeyStore,
    Ledger,
    Limiter,
    Limits,
    LimitsMiddleware,
    LoggingSink,
    MemoryBudgets,
    Metrics,
    MetricsMiddleware,
    Sink,
    SQLiteKeys,
    UsageMiddleware,
    Verifier,
)
from .middleware.admin import ADMIN_PATHS, AdminMiddleware
from .middleware.limits import Gate
from .middleware.tracing import TracingMiddleware, otel_installed
from .pool import ModelPool

if TYPE_CHECKING:
    from .shared.postgres_ledger import PostgresLedger
    from .shared.wiring import SharedBackends

__all__ = ["Layer", "default_middleware", "key_identity"]

Layer = Callable[[ASGIApp], ASGIApp]
"""A middleware factory: takes the app inside, returns the app around it (`functools.partial(Cls, **options)`)."""


def default_middleware(pool: ModelPool, *, verify: Verifier | None = None) -> tuple[Layer, ...]:
    """The layers the settings ask for, outermost first: tracing (where `opentelemetry-api` is
    installed), usage (always; metrics, and the ledger,
    JSON Lines file and log if configured), auth (with keys configured or a `verify`), limits
    (with limits configured or a `verify`, whose keys may carry their own), metrics (`GET
    /metrics` unless `metrics_path` is None). Their state is shared by every app given them."""
    settings = pool.settings
    shared = _shared(pool)
    ledger: Ledger | PostgresLedger | None = Ledger(settings.usage_ledger) if settings.usage_ledger else None
    if shared is not None and shared.ledger is not None:  # `state_url`: usage and budgets in PostgreSQL
        ledger = shared.ledger
    metrics = Metrics(
        models=lambda: [(m.id, pool.loaded(m.id) is not None) for m in pool.settings.models],
        queued=lambda: [(m.id, pool.queued(m.id)) for m in pool.settings.models],
        engines=pool.engine_health,
    )
    sinks: list[Sink] = [metrics.observe]
    if ledger is not None:
        sinks.append(ledger.record)
    if settings.usage_jsonl:
        sinks.append(JSONLinesSink(settings.usage_jsonl))
    if settings.usage_log:
        sinks.append(LoggingSink())
    probes = ("/health", *([settings.metrics_path] if settings.metrics_path else []))  # neither recorded nor limited
    probes = (*probes, *(ADMIN_PATHS if settings.admin_api else ()))
    layers: list[Layer] = [functools.partial(UsageMiddleware, sinks=sinks, exclude=probes)]
    if otel_installed():  # OpenTelemetry's API is installed: spans join the host's traces
        layers.insert(0, functools.partial(TracingMiddleware, trace_content=settings.trace_content))
    keys = settings.all_api_keys()
    db_keys = shared.keys if shared is not None else None  # `state_url`: keys made by `asgi-llm keys` there
    if settings.auth_enabled or verify is not None or (db_keys is not None and db_keys.holds_keys()):
        stored: Verifier | None = db_keys or (SQLiteKeys(settings.keys_db) if settings.keys_db else None)
        current: list[Verifier] = [_verifier(keys, stored, verify) or KeyStore()]  # a keys file with no keys lets no one in

        def rekey(new: Settings) -> None:  # `pool.reload()`: added keys work and revoked ones fail at once
            current[0] = _verifier(new.all_api_keys(), stored, verify) or KeyStore()

        async def verifier(key: str) -> KeyInfo | None:
            return await current[0](key)

        pool.reloaded.append(rekey)
        public, limit = settings.public_paths, settings.max_body_bytes
        layers.append(functools.partial(AuthMiddleware, verify=verifier, public=public, max_body_bytes=limit))
    default = _limits(settings.limits)
    stored_limits = settings.keys_db or db_keys is not None  # stored keys may carry limits
    if verify is not None or stored_limits or not default.unlimited or any(key.limits is not None for key in keys):
        gate = shared.gate(default, ledger) if shared is not None else None  # `limits_url`: counted in Redis
        limiter: Gate = gate or Limiter(default, budgets=ledger or MemoryBudgets())
        layers.append(functools.partial(LimitsMiddleware, limiter=limiter, exempt=(*settings.public_paths, *probes)))
    if settings.metrics_path:
        layers.append(functools.partial(MetricsMiddleware, metrics=metrics, path=settings.metrics_path))
    if settings.admin_api:
        layers.append(functools.partial(AdminMiddleware, pool=pool, max_body_bytes=settings.max_body_bytes))
    return tuple(layers)


def _shared(pool: ModelPool) -> SharedBackends | None:
    """The Redis and PostgreSQL backends the settings name (their clients imported only then)."""
    settings = pool.settings
    if settings.limits_url is None and settings.state_url is None:
        return None
    from .shared.wiring import SharedBackends

    return SharedBackends(
        limits_url=settings.limits_url,
        state_url=settings.state_url,
        timeout=settings.backend_timeout,
        fail_open=settings.fail_open,
        lease_seconds=settings.lease_seconds,
        clients=pool.clients,
    )


def _limits(config: LimitsConfig) -> Limits:
    return Limits(**config.model_dump())


def _verifier(keys: Sequence[ApiKeyConfig], stored: Verifier | None, verify: Verifier | None) -> Verifier | None:
    """The configured keys first, then those made by `asgi-llm keys`, then the host's verifier."""
    chain: list[Verifier] = [
        *([KeyStore((key.key.get_secret_value(), key_identity(key)) for key in keys)] if keys else []),
        *([stored] if stored is not None else []),
        *([verify] if verify is not None else []),
    ]
    if len(chain) <= 1:
        return chain[0] if chain else None

    async def any_of(key: str) -> KeyInfo | None:
        for check in chain:
            found = await check(key)
            if found is not None:
                return found
        return None

    return any_of


def key_identity(key: ApiKeyConfig) -> KeyInfo:
    """Who a configured key is, as the layers see it: its name, allow-lists, limits, role."""
    return KeyInfo(
        name=key.name,
        models=None if key.models is None else frozenset(key.models),
        protocols=None if key.protocols is None else frozenset(key.protocols),
        limits=None if key.limits is None else _limits(key.limits),
        operator=key.operator,
    )
