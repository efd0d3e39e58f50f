"""Prometheus metrics: `GET /metrics` (below the mount) in the text format.

`Metrics` counts what the usage layer records (it is a usage sink: `Metrics.observe`), so
metrics and the ledger never disagree; `MetricsMiddleware` serves the page and counts the
requests in flight. Labels are bounded: the protocol, the route template, the canonical
model id and the key's *name* — never a key, and never a name a client made up.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence

from asgi_llm.core import EngineHealth, Forbidden
from asgi_llm.http.asgi import ASGIApp, Receive, Scope, Send
from asgi_llm.http.context import Classify, request_context, request_info, send_error

from .prometheus import CONTENT_TYPE, Counter, Gauge, Histogram
from .usage import UsageRecord

__all__ = ["DURATION_BUCKETS", "TTFT_BUCKETS", "Metrics", "MetricsMiddleware"]

TTFT_BUCKETS = (0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
DURATION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)

_BY = ("protocol", "model", "key")


class Metrics:
    """The counters; `models` lists `(id, loaded)` for the loaded-models gauge."""

    def __init__(
        self,
        *,
        models: Callable[[], Iterable[tuple[str, bool]]] | None = None,
        queued: Callable[[], Iterable[tuple[str, int]]] | None = None,
        engines: Callable[[], Iterable[tuple[str, EngineHealth]]] | None = None,
        ttft_buckets: Sequence[float] = TTFT_BUCKETS,
        duration_buckets: Sequence[float] = DURATION_BUCKETS,
    ) -> None:
        self._models = models
        self._queued = queued
        self._engines = engines
        self.requests = Counter(
            "asgi_llm_requests_total", "Requests answered.", ("protocol", "endpoint", "model", "key", "status")
        )
        self.errors = Counter(
            "asgi_llm_request_errors_total", "Requests answered with a status of 400 or more.", (*_BY, "status")
        )
        self.disconnects = Counter(
            "asgi_llm_client_disconnects_total", "Requests whose client left before the response was complete.", _BY
        )
        self.prompt_tokens = Counter("asgi_llm_prompt_tokens_total", "Prompt tokens processed (tokens in).", _BY)
        self.completion_tokens = Counter("asgi_llm_completion_tokens_total", "Tokens generated (tokens out).", _BY)
        self.cached_tokens = Counter(
            "asgi_llm_cached_prompt_tokens_total", "Prompt tokens reused from the KV cache.", _BY
        )
        self.ttft = Histogram(
            "asgi_llm_time_to_first_token_seconds",
            "Seconds from arrival to the first generated token.",
            _BY,
            ttft_buckets,
        )
        self.duration = Histogram(
            "asgi_llm_request_duration_seconds",
            "Seconds from arrival to the end of the response.",
            ("protocol", "endpoint", "model", "key"),
            duration_buckets,
        )
        self.in_flight = Gauge("asgi_llm_requests_in_flight", "Requests being served now.", ("protocol",))
        self.loaded = Gauge("asgi_llm_model_loaded", "1 if the model is loaded, 0 if not.", ("model",))
        self.waiting = Gauge("asgi_llm_requests_queued", "Requests waiting for their model to be free.", ("model",))
        self.faults = Counter(
            "asgi_llm_engine_faults_total",
            "Requests a fault on the model's side ended, the others going on.",
            ("model",),
        )
        self.stalls = Counter(
            "asgi_llm_engine_stalls_total", "Times a model's work made no progress for its stall_seconds.", ("model",)
        )
        self.restarts = Counter(
            "asgi_llm_engine_restarts_total", "Times a model restarted in place after a stall or a fault.", ("model",)
        )
        self.stalled = Gauge(
            "asgi_llm_engine_stalled", "1 while a loaded model cannot serve a fresh request.", ("model",)
        )
        self.drafted = Counter(
            "asgi_llm_speculative_drafted_tokens_total", "Tokens a model drafted to verify (speculative).", ("model",)
        )
        self.accepted = Counter(
            "asgi_llm_speculative_accepted_tokens_total", "Drafted tokens the model's picks took.", ("model",)
        )
        self.recalled = Counter(
            "asgi_llm_speculative_recalled_tokens_total",
            "Of the drafted tokens, those recalled from the model's memory of past replies.",
            ("model",),
        )
        self.recalled_accepted = Counter(
            "asgi_llm_speculative_recalled_accepted_tokens_total", "Recalled tokens the model's picks took.", ("model",)
        )
        self.remembered = Gauge(
            "asgi_llm_speculative_memory_runs",
            "Runs of past replies the model's memory holds (speculative_memory).",
            ("model",),
        )

    def observe(self, record: UsageRecord) -> None:
        """A usage sink."""
        model, key = record.model or "", record.key or ""
        by = (record.protocol, model, key)
        status = str(record.status)
        self.requests.inc((record.protocol, record.endpoint, model, key, status))
        if record.status >= 400:
            self.errors.inc((*by, status))
        if record.disconnected:
            self.disconnects.inc(by)
        if record.model is not None:
            self.prompt_tokens.inc(by, record.prompt_tokens)
            self.completion_tokens.inc(by, record.completion_tokens)
            self.cached_tokens.inc(by, record.cached_tokens)
        if record.time_to_first_token is not None:
            self.ttft.observe(by, record.time_to_first_token)
        self.duration.observe((record.protocol, record.endpoint, model, key), record.duration)

    def render(self) -> str:
        if self._models is not None:
            self.loaded.clear()
            for model, loaded in self._models():
                self.loaded.set((model,), 1.0 if loaded else 0.0)
        if self._queued is not None:
            self.waiting.clear()
            for model, count in self._queued():
                self.waiting.set((model,), float(count))
        if self._engines is not None:
            self.stalled.clear()
            self.remembered.clear()
            for model, health in self._engines():
                self.faults.total((model,), health.faults)
                self.stalls.total((model,), health.stalls)
                self.restarts.total((model,), health.restarts)
                self.stalled.set((model,), 1.0 if health.stalled else 0.0)
                self.drafted.total((model,), health.drafted)
                self.accepted.total((model,), health.accepted)
                self.recalled.total((model,), health.recalled)
                self.recalled_accepted.total((model,), health.recalled_accepted)
                self.remembered.set((model,), float(health.remembered))
        families = (
            self.requests,
            self.errors,
            self.disconnects,
            self.prompt_tokens,
            self.completion_tokens,
            self.cached_tokens,
            self.ttft,
            self.duration,
            self.in_flight,
            self.waiting,
            self.loaded,
            self.faults,
            self.stalls,
            self.restarts,
            self.stalled,
            self.drafted,
            self.accepted,
            self.recalled,
            self.recalled_accepted,
            self.remembered,
        )
        return "".join(line + "\n" for family in families for line in family.render())


_OPERATORS_ONLY = "Only an operator API key may read the metrics: they show every key's usage."


class MetricsMiddleware:
    """`MetricsMiddleware(app, metrics=metrics)` serves `GET {path}` and counts requests in flight.
    Put it inside the auth layer to protect the page (operator keys only), or list `path` among
    the public ones."""

    def __init__(
        self, app: ASGIApp, *, metrics: Metrics, path: str = "/metrics", classify: Classify | None = None
    ) -> None:
        self.app = app
        self.metrics = metrics
        self.path = "/" + path.strip("/")  # read by the app's OpenAPI document
        self._classify = classify

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        info = request_info(scope, self._classify)
        if info.path == self.path and scope["method"] == "GET":
            context = request_context(scope)
            context.info = dataclasses.replace(info, endpoint=self.path)
            key = context.key
            if key is not None and not key.operator:  # the page names every key and its usage
                await send_error(scope, send, info, Forbidden(_OPERATORS_ONLY))
            else:
                await self._serve(send)
            return
        labels = (info.protocol,)
        self.metrics.in_flight.inc(labels)
        try:
            await self.app(scope, receive, send)
        finally:
            self.metrics.in_flight.inc(labels, -1)

    async def _serve(self, send: Send) -> None:
        body = self.metrics.render().encode("utf-8")
        headers = [(b"content-type", CONTENT_TYPE.encode()), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})
