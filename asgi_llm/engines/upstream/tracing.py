"""The upstream call as a child of the request's span, with its W3C `traceparent` sent along, so
the upstream's own trace (another asgi-llm, vLLM) joins ours. Nothing without OpenTelemetry."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from ...support.otel import api, inject

__all__ = ["upstream_call"]


@contextlib.asynccontextmanager
async def upstream_call(model: str, url: str, path: str) -> AsyncIterator[dict[str, str]]:
    """The headers that carry the trace to the upstream; a CLIENT span around the call while
    tracing records (a non-recording one still passes the host's trace on)."""
    otel = api()
    if otel is None:
        yield {}
        return
    operation = (
        "embeddings" if path.endswith("/embeddings") else "text_completion" if path == "/completions" else "chat"
    )
    span = otel.tracer().start_span(f"{operation} {model}", kind=otel.trace.SpanKind.CLIENT)
    headers: dict[str, str] = {}
    inject(headers, span)
    if not span.is_recording():
        yield headers
        return
    span.set_attributes(
        {
            "gen_ai.operation.name": operation,
            "gen_ai.request.model": model,
            "server.address": _host(url),
            "url.path": path,
        }
    )
    try:
        yield headers
    except BaseException as exc:
        span.record_exception(exc)
        span.set_status(otel.trace.Status(otel.trace.StatusCode.ERROR))
        raise
    finally:
        span.end()


def _host(url: str) -> str:
    """The replica's host and port, never its credentials or path."""
    rest = url.split("://", 1)[-1]
    return rest.split("/", 1)[0].rsplit("@", 1)[-1]
