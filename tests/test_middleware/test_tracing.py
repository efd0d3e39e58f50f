"""The tracing layer around scripted engines, with an SDK provider of the test's own (never the
global one): what a span carries, what it never carries unless asked, the `traceparent` it joins
without a host span, and that without the package or an SDK it does nothing at all."""

from __future__ import annotations

import functools
import io
import json
import sys
from typing import Any

import pytest
from opentelemetry import context, propagate, trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from asgi_llm import LLMApp
from asgi_llm.cli.otel_export import otlp_from_env
from asgi_llm.core import Finish, PromptRead, Queued, TextDelta, Usage
from asgi_llm.http.context import request_context
from asgi_llm.http.trace_notes import TraceNotes
from asgi_llm.middleware import UsageMiddleware
from asgi_llm.middleware.tracing import TracingMiddleware
from asgi_llm.stack import default_middleware
from asgi_llm.support.otel import OTel, probe

pytestmark = pytest.mark.anyio

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"


class _Local(OTel):
    """The API, with a tracer from a provider of this test's own."""

    def __init__(self, provider: Any) -> None:
        super().__init__(trace, propagate, context)
        object.__setattr__(self, "provider", provider)

    def tracer(self) -> Any:
        return self.provider.get_tracer("test")  # type: ignore[attr-defined]


def _traced_app(kit: Any, otel: OTel | None, *, content: bool = False) -> LLMApp:
    layers = [functools.partial(TracingMiddleware, trace_content=content, otel=otel), UsageMiddleware]
    return LLMApp(pool=kit.fake_pool(), adapters=kit.ALL, middleware=layers)


@pytest.fixture
def spans() -> tuple[OTel, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return _Local(provider), exporter


async def _one(kit: Any, app: LLMApp, exporter: InMemorySpanExporter, **options: Any) -> ReadableSpan:
    async with kit.running(app):
        reply = await kit.drive(app, "POST", "/chat/completions", json={**kit.CHAT, "max_tokens": 5}, **options)
    assert reply.status == 200
    (span,) = exporter.get_finished_spans()
    assert (span.attributes or {})["asgi_llm.request_id"] == reply.headers["x-request-id"]
    return span


async def test_a_span_carries_the_requests_figures_and_no_text(kit: Any, spans: tuple[OTel, Any]) -> None:
    otel, exporter = spans
    span = await _one(kit, _traced_app(kit, otel), exporter)
    attributes = dict(span.attributes or {})
    assert span.name == "chat fake" and span.kind == trace.SpanKind.SERVER  # no host span: it starts the trace
    assert attributes["gen_ai.operation.name"] == "chat" and attributes["gen_ai.request.max_tokens"] == 5
    assert (attributes["gen_ai.usage.input_tokens"], attributes["gen_ai.usage.output_tokens"]) == (3, 2)
    assert attributes["gen_ai.response.finish_reasons"] == ("stop",)
    assert attributes["gen_ai.response.model"] == "fake" and attributes["http.response.status_code"] == 200
    assert not any(name.endswith(".messages") for name in attributes)
    assert [event.name for event in span.events] == ["asgi_llm.prompt_read", "asgi_llm.first_token"]


async def test_trace_content_adds_the_prompt_and_the_completion(kit: Any, spans: tuple[OTel, Any]) -> None:
    otel, exporter = spans
    attributes = dict((await _one(kit, _traced_app(kit, otel, content=True), exporter)).attributes or {})
    assert json.loads(str(attributes["gen_ai.input.messages"])) == [{"role": "user", "content": "hi"}]
    assert json.loads(str(attributes["gen_ai.output.messages"])) == [{"role": "assistant", "content": "Hello there"}]


async def test_without_a_host_span_it_joins_the_callers_traceparent(kit: Any, spans: tuple[OTel, Any]) -> None:
    otel, exporter = spans
    span = await _one(kit, _traced_app(kit, otel), exporter, headers=[("traceparent", TRACEPARENT)])
    assert span.context is not None and f"{span.context.trace_id:032x}" == TRACE_ID
    assert span.parent is not None and f"{span.parent.span_id:016x}" == "00f067aa0ba902b7"


async def test_an_error_is_marked_by_its_status(kit: Any, spans: tuple[OTel, Any]) -> None:
    otel, exporter = spans
    app = _traced_app(kit, otel)
    async with kit.running(app):
        reply = await kit.drive(app, "POST", "/chat/completions", json={**kit.CHAT, "model": "nope"})
    (span,) = exporter.get_finished_spans()
    assert reply.status == 404 and (span.attributes or {})["http.response.status_code"] == 404
    assert span.status.status_code == trace.StatusCode.UNSET  # the client's mistake, not a fault here


async def _context_seen(kit: Any, otel: OTel | None) -> tuple[Any, bool]:
    seen: list[Any] = []

    async def inner(scope: Any, receive: Any, send: Any) -> None:
        seen.append(request_context(scope).trace)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    reply = await kit.drive(TracingMiddleware(inner, otel=otel), "GET", "/x")
    return seen[0], reply.body == b"ok"


async def test_without_the_package_or_an_sdk_nothing_is_done(kit: Any) -> None:
    assert await _context_seen(kit, None) == (None, True)  # as if opentelemetry-api were not installed
    no_sdk = _Local(trace.NoOpTracerProvider())  # the API alone: every span a non-recording one
    assert await _context_seen(kit, no_sdk) == (None, True)


def test_the_package_is_looked_for_and_its_absence_tolerated(monkeypatch: pytest.MonkeyPatch) -> None:
    assert probe() is not None
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    assert probe() is None


async def test_the_default_stack_puts_tracing_outermost_and_configures_nothing(kit: Any) -> None:
    provider = trace.get_tracer_provider()
    layers = default_middleware(kit.fake_pool())
    assert isinstance(layers[0], functools.partial) and layers[0].func is TracingMiddleware
    app = LLMApp(pool=kit.fake_pool())
    async with kit.running(app):
        assert (await kit.drive(app, "POST", "/chat/completions", json=kit.CHAT)).status == 200
    assert trace.get_tracer_provider() is provider  # the host's (here: none), never one of ours


def test_trace_notes_mark_the_wait_the_prompt_and_the_first_token() -> None:
    ticks = iter(range(1_000, 10_000, 1_000))
    notes = TraceNotes(clock=lambda: next(ticks))
    for event in (
        Queued(),
        Queued(1.0),
        PromptRead(7, 4),
        TextDelta("a"),
        TextDelta("b"),
        Finish("length", Usage(7, 2)),
    ):
        notes.saw(event)
    assert [(m.name, m.at) for m in notes.marks] == [
        ("asgi_llm.queued", 1_000),
        ("asgi_llm.dequeued", 3_000),
        ("asgi_llm.prompt_read", 4_000),
        ("asgi_llm.first_token", 5_000),
    ]
    assert notes.marks[1].attributes == {"asgi_llm.queue.wait_seconds": 1e-6}
    assert notes.marks[2].attributes == {"gen_ai.usage.input_tokens": 7, "asgi_llm.prompt.cached_tokens": 4}
    assert notes.finish_reasons == ["length"] and notes.output() == []  # no content kept unless asked


def test_serve_exports_only_when_the_otlp_variables_ask(monkeypatch: pytest.MonkeyPatch) -> None:
    err = io.StringIO()
    assert otlp_from_env({"OTEL_SERVICE_NAME": "x"}, err) is None and err.getvalue() == ""
    assert otlp_from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"}, err) is None
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.http.trace_exporter", None)
    assert otlp_from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, err) is None
    (line,) = err.getvalue().splitlines()
    assert "OTEL_EXPORTER_OTLP_ENDPOINT" in line and "opentelemetry-exporter-otlp-proto-http" in line
