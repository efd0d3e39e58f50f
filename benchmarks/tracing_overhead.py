"""Per-request cost of the tracing layer: with OpenTelemetry's API alone (no SDK configured, the
state of every host that has not set one up) and with the SDK recording every span.

Why this measures what it measures: the layer's cost is fixed per request, so the request must
cost little else. Each request is one raw ASGI call of a non-streaming chat completion on the
scripted `FakeEngine` (no HTTP, no model work), through the usage layer alone (`off`), or the
tracing layer around it: with the API alone (`api`: no tracer provider set, so every span is the
API's non-recording one), or with an SDK `TracerProvider` recording every span into a batching
processor whose exporter drops them (`sdk`: attributes, events, the context attached, the span
ended; no network). The three run in alternating blocks so drift hits them alike; the overhead
is each one's mean (and median) minus `off`'s. The goal: under 0.2 ms a request with the API alone.

Run: .venv/bin/python benchmarks/tracing_overhead.py [--requests N] [--block B]
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import time
from collections.abc import Sequence
from typing import Any

import anyio
from opentelemetry import context, propagate, trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from asgi_llm import LLMApp, ModelConfig, ModelPool, Settings
from asgi_llm.engines.fake import FakeEngine
from asgi_llm.middleware import UsageMiddleware
from asgi_llm.middleware.tracing import TracingMiddleware
from asgi_llm.support.otel import OTel, api

BODY = json.dumps({"model": "bench", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}).encode()


class _Dropped(SpanExporter):
    def export(self, spans: Sequence[Any]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


class _WithSDK(OTel):
    """The API with a recording provider of its own (setting the global one is the host's)."""

    def __init__(self, provider: TracerProvider) -> None:
        super().__init__(trace, propagate, context)
        object.__setattr__(self, "provider", provider)

    def tracer(self) -> Any:
        return self.provider.get_tracer("asgi_llm")  # type: ignore[attr-defined]


def _app(pool: ModelPool, otel: OTel | None, traced: bool) -> LLMApp:
    layers: list[Any] = [UsageMiddleware]
    if traced:
        layers.insert(0, functools.partial(TracingMiddleware, otel=otel))
    return LLMApp(pool=pool, middleware=layers)


async def _once(app: LLMApp) -> float:
    sent: list[dict[str, Any]] = []
    incoming = [{"type": "http.request", "body": BODY, "more_body": False}]

    async def receive() -> dict[str, Any]:
        if incoming:
            return incoming.pop()
        await anyio.sleep_forever()
        raise AssertionError

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/chat/completions",
        "raw_path": b"/chat/completions",
        "root_path": "",
        "query_string": b"",
        "headers": [(b"content-type", b"application/json"), (b"host", b"bench")],
        "client": ("127.0.0.1", 1),
        "server": ("bench", 80),
    }
    started = time.perf_counter()
    await app(scope, receive, send)
    took = time.perf_counter() - started
    assert sent[0]["status"] == 200, sent
    return took


async def main(requests: int, block: int) -> None:
    settings = Settings(models=(ModelConfig(id="bench", path="x.gguf"),))
    pool = ModelPool(settings, engine_factory=lambda config, thread: FakeEngine(config, thread))
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(_Dropped()))
    assert api() is not None, "install asgi-llm[otel] (opentelemetry-api) and opentelemetry-sdk"
    apps = {"off": _app(pool, None, False), "api": _app(pool, api(), True), "sdk": _app(pool, _WithSDK(provider), True)}
    times: dict[str, list[float]] = {name: [] for name in apps}
    async with apps["off"].lifespan():
        await pool.wait_ready()
        for app in apps.values():  # warm-up
            for _ in range(200):
                await _once(app)
        done = 0
        while done < requests:
            for name, app in apps.items():
                times[name] += [await _once(app) for _ in range(block)]
            done += block
    provider.shutdown()
    base, base_p50 = statistics.fmean(times["off"]), statistics.median(times["off"])
    print(f"{requests} requests per side, blocks of {block}; raw ASGI, FakeEngine, non-streaming chat")
    for name, samples in times.items():
        mean, p50 = statistics.fmean(samples), statistics.median(samples)
        extra = (
            ""
            if name == "off"
            else f"  overhead: mean {1000 * (mean - base):+.3f}, p50 {1000 * (p50 - base_p50):+.3f} ms"
        )
        print(f"  {name:>3}: mean {1000 * mean:.3f} ms  p50 {1000 * p50:.3f} ms{extra}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--block", type=int, default=250)
    options = parser.parse_args()
    anyio.run(main, options.requests, options.block)
