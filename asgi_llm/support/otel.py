"""OpenTelemetry's API, only where it is installed (`asgi-llm[otel]`), and looked for once.

The one module of ours that imports `opentelemetry` on behalf of a mounted app. It never sets
a tracer provider, an exporter or a propagator: those are the host's (or `asgi-llm serve`'s,
in `cli/otel_export.py`). Without an SDK configured, every span is the API's non-recording one and
the layer that asks skips all its work.
"""

from __future__ import annotations

import functools
from collections.abc import MutableMapping
from dataclasses import dataclass
from typing import Any

__all__ = ["OTel", "api", "inject", "probe"]

TRACER_NAME = "asgi_llm"


@dataclass(frozen=True)
class OTel:
    """The parts of the API we use, imported together."""

    trace: Any
    propagate: Any
    context: Any

    def tracer(self) -> Any:
        """Our tracer from the global provider: a proxy until the host sets one, then the host's."""
        return self.trace.get_tracer(TRACER_NAME)


def probe() -> OTel | None:
    """The API, or None where `opentelemetry-api` is not installed."""
    try:
        from opentelemetry import context, propagate, trace
    except ImportError:
        return None
    return OTel(trace, propagate, context)


@functools.cache
def api() -> OTel | None:
    """`probe()`, once per process: a failed import is not cached by Python, and costs every time."""
    return probe()


def inject(headers: MutableMapping[str, str], span: Any = None) -> None:
    """The W3C `traceparent` (and whatever else the host's propagators carry) of `span`, or of the
    current span, into `headers` bound for another server."""
    otel = api()
    if otel is None:
        return
    context = None if span is None else otel.trace.set_span_in_context(span)
    otel.propagate.inject(headers, context=context)
