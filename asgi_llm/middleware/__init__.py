"""Pure ASGI middleware, one concern each: auth, usage accounting, limits, metrics, tracing.

Each layer works around any ASGI app; `LLMApp` composes them from its settings (or takes
its own list) and classifies every request first, so the layers answer in the calling
protocol's error envelope.
"""

from asgi_llm.core.policy import KeyInfo, Limits
from asgi_llm.http.context import KEY, KEY_INFO, Classify, Meter, RequestContext, RequestInfo, request_context

from .auth import AuthMiddleware
from .keyring import KeyExists, StoredKey
from .keys import KeyStore, Verifier
from .ledger import Ledger
from .limits import BudgetStore, Limiter, LimitsMiddleware, MemoryBudgets
from .metrics import Metrics, MetricsMiddleware
from .sinks import JSONLinesSink, LoggingSink
from .sqlite_keys import SQLiteKeys
from .tracing import TracingMiddleware
from .usage import Sink, UsageMiddleware, UsageRecord

__all__ = [
    "KEY",
    "KEY_INFO",
    "AuthMiddleware",
    "BudgetStore",
    "Classify",
    "JSONLinesSink",
    "KeyExists",
    "KeyInfo",
    "KeyStore",
    "Ledger",
    "Limiter",
    "Limits",
    "LimitsMiddleware",
    "LoggingSink",
    "MemoryBudgets",
    "Meter",
    "Metrics",
    "MetricsMiddleware",
    "RequestContext",
    "RequestInfo",
    "SQLiteKeys",
    "Sink",
    "StoredKey",
    "TracingMiddleware",
    "UsageMiddleware",
    "UsageRecord",
    "Verifier",
    "request_context",
]
