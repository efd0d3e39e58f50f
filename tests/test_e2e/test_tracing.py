"""OpenTelemetry end to end: a FastAPI host instrumented with opentelemetry-instrumentation-asgi
and the SDK's in-memory exporter mounts the app; a second `asgi-llm serve` is its upstream and
exports its own spans over OTLP (the standard variables) to a receiver in this test. Our span
is a child of the host's request span with the GenAI figures, and the upstream's span carries
the same trace id: the `traceparent` went along."""

from __future__ import annotations

import contextlib
import http.server
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import openai
import pytest
from fastapi import FastAPI
from opentelemetry import trace
from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util._once import Once

from asgi_llm import ApiKeyConfig, LLMApp, ModelConfig, Settings

MODEL = "SmolLM2-135M-Instruct"


class _Receiver(http.server.BaseHTTPRequestHandler):
    """An OTLP/HTTP collector of one route: `POST /v1/traces`, protobuf."""

    spans: list[Any]

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["content-length"]))
        request = ExportTraceServiceRequest.FromString(body)
        self.spans.extend(s for r in request.resource_spans for scope in r.scope_spans for s in scope.spans)
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def collector() -> Iterator[tuple[str, list[Any]]]:
    received: list[Any] = []
    handler = type("Receiver", (_Receiver,), {"spans": received})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", received
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def upstream(asgi_llm_serve: Callable[..., Any], collector: tuple[str, list[Any]]) -> Iterator[str]:
    endpoint, _ = collector
    env = {**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_BSP_SCHEDULE_DELAY": "50"}
    env["OTEL_SERVICE_NAME"] = "upstream-llm"
    with asgi_llm_serve("--n-ctx", "1024", "--parallel", "1", "--threads", "1", env=env) as served:
        yield served.url


@pytest.fixture(scope="module")
def exporter() -> Iterator[InMemorySpanExporter]:
    """The host's SDK, set globally as a host does; put back as it was afterwards."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    trace.set_tracer_provider(provider)
    yield memory
    provider.shutdown()
    trace._TRACER_PROVIDER = None  # what opentelemetry's own test utilities reset
    trace._TRACER_PROVIDER_SET_ONCE = Once()


@pytest.fixture(scope="module")
def host(exporter: InMemorySpanExporter, upstream: str, serve_app: Callable[..., Any]) -> Iterator[str]:
    settings = Settings(
        models=(
            ModelConfig(id=MODEL, aliases=("default",), n_ctx=1024, parallel=1, n_threads=1),
            ModelConfig(id="remote", base_url=f"{upstream}/v1", upstream_model=MODEL),
        ),
        api_keys=(ApiKeyConfig(name="team-a", key="sk-team-a"),),
    )
    llm = LLMApp(settings)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> Any:
        async with llm.lifespan():
            await llm.pool.wait_ready()
            yield

    app = FastAPI(lifespan=lifespan)
    app.mount("/v1", llm)
    with serve_app(OpenTelemetryMiddleware(app, exclude_spans=["receive", "send"])) as url:
        yield url


@pytest.fixture(scope="module")
def sdk(host: str) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{host}/v1", api_key="sk-team-a", max_retries=0, timeout=60) as client:
        yield client


def _ours(exporter: InMemorySpanExporter, request_id: str) -> tuple[ReadableSpan, list[ReadableSpan]]:
    """Our span, once it has ended: just after the response's last bytes went out."""
    deadline = time.monotonic() + 10
    while True:
        spans = list(exporter.get_finished_spans())
        found = [s for s in spans if (s.attributes or {}).get("asgi_llm.request_id") == request_id]
        if found or time.monotonic() > deadline:
            assert len(found) == 1
            return found[0], spans
        time.sleep(0.01)


def test_our_span_is_a_child_of_the_hosts_with_the_genai_figures(
    sdk: openai.OpenAI, exporter: InMemorySpanExporter
) -> None:
    raw = sdk.chat.completions.with_raw_response.create(
        model="default", messages=[{"role": "user", "content": "Say hi."}], max_tokens=8, temperature=0
    )
    reply = raw.parse()
    ours, spans = _ours(exporter, raw.headers["x-request-id"])
    hosts = [s for s in spans if s.kind == trace.SpanKind.SERVER and s.context.trace_id == ours.context.trace_id]
    assert len(hosts) == 1 and ours.parent is not None and ours.parent.span_id == hosts[0].context.span_id
    attributes = dict(ours.attributes or {})
    assert reply.usage is not None
    assert attributes == {
        "asgi_llm.request_id": raw.headers["x-request-id"],
        "asgi_llm.protocol": "openai",
        "asgi_llm.key": "team-a",
        "http.request.method": "POST",
        "http.route": "/chat/completions",
        "http.response.status_code": 200,
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "default",
        "gen_ai.request.max_tokens": 8,
        "gen_ai.response.model": MODEL,
        "gen_ai.usage.input_tokens": reply.usage.prompt_tokens,
        "gen_ai.usage.output_tokens": reply.usage.completion_tokens,
        "gen_ai.response.finish_reasons": (reply.choices[0].finish_reason,),
    }  # no prompt or completion text: trace_content is off
    assert ours.name == "chat default"
    names = [event.name for event in ours.events]
    assert names[0] == "asgi_llm.prompt_read" and "asgi_llm.first_token" in names
    assert ours.events[0].attributes == {
        "gen_ai.usage.input_tokens": reply.usage.prompt_tokens,
        "asgi_llm.prompt.cached_tokens": ours.events[0].attributes["asgi_llm.prompt.cached_tokens"],  # type: ignore[index]
    }
    assert ours.start_time is not None and ours.end_time is not None
    assert all(ours.start_time <= event.timestamp <= ours.end_time for event in ours.events)


def test_the_upstream_call_carries_the_trace_to_the_upstream(
    sdk: openai.OpenAI, exporter: InMemorySpanExporter, collector: tuple[str, list[Any]]
) -> None:
    raw = sdk.chat.completions.with_raw_response.create(
        model="remote", messages=[{"role": "user", "content": "Say hi."}], max_tokens=8, temperature=0
    )
    ours, spans = _ours(exporter, raw.headers["x-request-id"])
    call = next(
        s for s in spans if s.kind == trace.SpanKind.CLIENT and s.parent and s.parent.span_id == ours.context.span_id
    )
    assert call.name == f"chat {MODEL}" and (call.attributes or {})["gen_ai.request.model"] == MODEL
    assert (ours.attributes or {})["gen_ai.response.model"] == "remote"
    _, received = collector
    deadline = time.monotonic() + 15
    theirs = []
    while not theirs and time.monotonic() < deadline:  # the upstream's batch goes out every 50 ms
        theirs = [s for s in received if s.trace_id == ours.context.trace_id.to_bytes(16, "big")]
        time.sleep(0.05)
    assert len(theirs) == 1, "the upstream's span joined the host's trace"
    assert theirs[0].parent_span_id == call.context.span_id.to_bytes(8, "big")
    assert theirs[0].name == f"chat {MODEL}"
