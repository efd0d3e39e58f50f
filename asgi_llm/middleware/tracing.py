"""OpenTelemetry: one span per request, joining the host's trace, with the GenAI conventions.

The span is a child of whatever span is current (the host's request span, made by its own
instrumentation), else of the `traceparent` the request carries, else a new trace. It carries
`gen_ai.operation.name`, `gen_ai.request.model`, `gen_ai.request.max_tokens`,
`gen_ai.response.model`, `gen_ai.usage.input_tokens` / `output_tokens`,
`gen_ai.response.finish_reasons`, and our key name, request id and protocol; events mark the
queue wait, the prompt read and the first token. It is current while the request runs, so the
upstream engine's call is its child and carries its `traceparent`. Prompt and completion text
only with `trace_content`.

Nothing is configured here: the tracer comes from the global provider the host set. Without
`opentelemetry-api`, or with no SDK configured, the layer costs one check per request.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from asgi_llm.http.asgi import ASGIApp, Message, Receive, Scope, Send
from asgi_llm.http.context import Classify, meter_of, request_context, request_info
from asgi_llm.http.trace_notes import TraceNotes
from asgi_llm.support.otel import OTel, api

__all__ = ["TracingMiddleware", "otel_installed"]

_UNSET: Any = object()


class _ScopeHeaders:
    """A propagator's getter over ASGI headers (lower-case byte pairs), nothing copied."""

    def get(self, carrier: Iterable[tuple[bytes, bytes]], key: str) -> list[str] | None:
        name = key.lower().encode("latin-1")
        found = [bytes(v).decode("latin-1") for k, v in carrier if bytes(k).lower() == name]
        return found or None

    def keys(self, carrier: Iterable[tuple[bytes, bytes]]) -> list[str]:
        return [bytes(k).decode("latin-1") for k, _ in carrier]


_GETTER = _ScopeHeaders()


def otel_installed() -> bool:
    """Whether `opentelemetry-api` can be imported (looked for once per process)."""
    return api() is not None


class TracingMiddleware:
    """`TracingMiddleware(app, trace_content=False)`; `otel` is for tests (None: as if not installed)."""

    def __init__(
        self, app: ASGIApp, *, trace_content: bool = False, classify: Classify | None = None, otel: OTel | None = _UNSET
    ) -> None:
        self.app = app
        self._otel: OTel | None = api() if otel is _UNSET else otel
        self._tracer = None if self._otel is None else self._otel.tracer()
        self._content = trace_content
        self._classify = classify

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._tracer is None or scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        otel = self._otel
        assert otel is not None
        parent = None
        if not otel.trace.get_current_span().get_span_context().is_valid:  # no host span: the caller's
            parent = otel.propagate.extract(scope.get("headers", ()), getter=_GETTER)
        kind = otel.trace.SpanKind.SERVER if parent is not None else otel.trace.SpanKind.INTERNAL
        span = self._tracer.start_span("asgi_llm.request", context=parent, kind=kind)
        if not span.is_recording():
            await self.app(scope, receive, send)
            return
        await self._traced(otel, span, scope, receive, send)

    async def _traced(self, otel: OTel, span: Any, scope: Scope, receive: Receive, send: Send) -> None:
        info, context = request_info(scope, self._classify), request_context(scope)
        meter = meter_of(scope)
        notes = context.trace = TraceNotes(content=self._content)
        span.set_attributes(
            {
                "asgi_llm.request_id": context.request_id,
                "asgi_llm.protocol": info.protocol,
                "http.request.method": str(scope.get("method", "")),
                "http.route": info.endpoint,
            }
        )
        status: list[int] = []

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                status.append(int(message["status"]))
            await send(message)

        token = otel.context.attach(otel.trace.set_span_in_context(span))
        try:
            await self.app(scope, receive, sending)
        except BaseException as exc:
            span.record_exception(exc)
            raise
        finally:
            otel.context.detach(token)
            _finish(otel, span, notes, scope, meter.failed or (status[0] if status else None))
            span.end()


def _finish(otel: OTel, span: Any, notes: TraceNotes, scope: Scope, status: int | None) -> None:
    context, meter = request_context(scope), meter_of(scope)
    if notes.operation is not None:
        span.update_name(f"{notes.operation} {notes.model}" if notes.model else notes.operation)
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": notes.operation,
        "gen_ai.request.model": notes.model,
        "gen_ai.request.max_tokens": notes.max_tokens,
        "gen_ai.response.model": meter.model,
        "gen_ai.response.finish_reasons": notes.finish_reasons or None,
        "asgi_llm.key": None if context.key is None else context.key.name,
        "http.response.status_code": status,
    }
    if meter.model is not None:
        usage = meter.total
        attributes.update(
            {"gen_ai.usage.input_tokens": usage.prompt_tokens, "gen_ai.usage.output_tokens": usage.completion_tokens}
        )
    if notes.content and notes.prompt is not None:
        attributes["gen_ai.input.messages"] = json.dumps(notes.prompt, ensure_ascii=False)
        attributes["gen_ai.output.messages"] = json.dumps(notes.output(), ensure_ascii=False)
    span.set_attributes({name: value for name, value in attributes.items() if value is not None})
    for mark in notes.marks:
        span.add_event(mark.name, mark.attributes, timestamp=mark.at)
    if status is None or status >= 500:
        span.set_attribute("error.type", str(status or "disconnected"))
        span.set_status(otel.trace.Status(otel.trace.StatusCode.ERROR))
