"""`asgi-llm serve`'s traces: an OTLP exporter, set up only when the standard `OTEL_EXPORTER_OTLP_*`
variables ask for one. Only for the process `serve` owns: a mounted app never sets a provider
or an exporter (its host's are used). Needs `opentelemetry-sdk` and an OTLP exporter package;
where they are missing, one line says so and the server runs without traces."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import IO, Any

__all__ = ["otlp_from_env"]

_PREFIX = "OTEL_EXPORTER_OTLP_"
_MISSING = (
    "asgi-llm: {names} set, but {what} is not installed; serving without traces "
    "(pip install opentelemetry-sdk opentelemetry-exporter-otlp-proto-{kind})"
)


def otlp_from_env(environ: Mapping[str, str], err: IO[str]) -> Callable[[], None] | None:
    """The global tracer provider with a batching OTLP exporter, from the environment (endpoint,
    headers, protocol, `OTEL_SERVICE_NAME`... as the SDK reads them); its shutdown (which sends
    what is left) is returned. None where no `OTEL_EXPORTER_OTLP_*` variable is set, where
    `OTEL_SDK_DISABLED` is true, or where the packages are missing (said on `err`)."""
    names = sorted(name for name in environ if name.startswith(_PREFIX))
    if not names or environ.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return None
    protocol = environ.get(_PREFIX + "TRACES_PROTOCOL") or environ.get(_PREFIX + "PROTOCOL") or "http/protobuf"
    kind = "grpc" if protocol == "grpc" else "http"
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import OTELResourceDetector, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        print(_MISSING.format(names=", ".join(names), what="opentelemetry-sdk", kind=kind), file=err)
        return None
    try:
        exporter = _exporter(kind)
    except ImportError:
        print(_MISSING.format(names=", ".join(names), what=f"the OTLP {kind} exporter", kind=kind), file=err)
        return None
    resource = Resource({"service.name": "asgi-llm"}).merge(OTELResourceDetector().detect())
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    shutdown: Callable[[], None] = provider.shutdown
    return shutdown


def _exporter(kind: str) -> Any:
    """The OTLP span exporter of `kind` (`grpc` or `http`), configured from the environment."""
    return importlib.import_module(f"opentelemetry.exporter.otlp.proto.{kind}.trace_exporter").OTLPSpanExporter()
