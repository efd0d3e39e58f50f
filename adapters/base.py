"""The contract between a wire-protocol adapter and the app's one generic endpoint glue.

An adapter is pure: it turns a decoded JSON body into a core request, and core
results and events into wire bytes. The app does all I/O.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from pydantic import BaseModel

from asgi_llm.core import (
    AdapterScale,
    EmbeddingRequest,
    EmbeddingResult,
    GenerationEvent,
    GenerationRequest,
    LLMError,
    ModelCard,
    RerankRequest,
    RerankResult,
    StateStore,
    TokenizerRequest,
    TokenizerResult,
    Usage,
)

from .wire_checks import refuse_unrecognized, validate

__all__ = [
    "Adapter",
    "ContextNeed",
    "CountRoute",
    "Detached",
    "DetachedEncoder",
    "EmbedRoute",
    "GenerateRoute",
    "InfoContext",
    "InfoRoute",
    "LoraRoute",
    "Meta",
    "Parsed",
    "Reply",
    "RerankRoute",
    "Resolve",
    "Route",
    "Runs",
    "StateRoute",
    "StateStore",
    "StreamEncoder",
    "Streamed",
    "TokenizerRoute",
    "Unrecorded",
    "refuse_unrecognized",
    "required_header",
    "stream_json",
    "validate",
]

Reply = tuple[int, Any]
"""A status and a JSON-able body."""

R = TypeVar("R")
O = TypeVar("O")
M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class Meta:
    """Facts fixed when a request starts; ids derive from `request_id` so renders are reproducible."""

    request_id: str
    created: int
    model: str
    prompt: Usage | None = None
    """The prompt's tokens (and cached ones) as the engine read them, where it told before the
    first token (a stream opens after that); None where it tells only at the finish."""
    trace: str | None = None
    """The request's `x-request-id`, which an error event in a begun stream carries."""
    decoded: tuple[int, int] | None = None
    """When a whole reply's first and last events came (`time.perf_counter_ns`), for a protocol
    that reports its own timings (Ollama's durations); None in a stream, which sees them come."""


@dataclass(frozen=True)
class ContextNeed:
    """The context a request needs (Ollama's `num_ctx`): refused, naming `param`, by a model
    loaded with less; a model with at least as much honours it."""

    tokens: int
    param: str


@dataclass(frozen=True)
class Parsed(Generic[R, O]):
    """A core request plus the wire-only options its protocol's renderer needs (a usage chunk,
    an encoding, stored-state ids...): each protocol's own type, or None."""

    request: R
    options: O
    stream: bool = False
    keep_alive: float | None = None
    """Seconds the model stays loaded after this request (negative = forever, 0 = unload)."""
    load_only: bool = False
    """Load (or, with keep_alive 0, unload) the model without generating; rendered with no events."""
    needs_context: ContextNeed | None = None
    background: bool = False
    """Run detached from the HTTP call (Responses' `background`): see `Detached`."""


class StreamEncoder(Protocol):
    """Stateful per stream."""

    media_type: str

    def open(self) -> bytes: ...

    def event(self, event: GenerationEvent) -> bytes: ...

    def close(self) -> bytes: ...

    def error(self, error: LLMError) -> bytes: ...

    def final(self) -> Any:
        """The whole response object the stream described, for its route's `record`; None
        where the route stores nothing."""
        ...


class Unrecorded:
    """For the encoders of streams that no route stores: `final()` is None."""

    def final(self) -> None:
        return None


G = TypeVar("G", bound=GenerationRequest)


Resolve = Callable[[Parsed[G, O], StateStore], Awaitable[Parsed[G, O]]]
"""Completes a parsed request from stored state (e.g. `previous_response_id`); may raise."""


@dataclass(frozen=True)
class GenerateRoute(Generic[G, O]):
    path: str
    parse: Callable[[Any], Parsed[G, O]]
    render: Callable[[Parsed[G, O], Meta, Sequence[GenerationEvent]], Any]
    encoder: Callable[[Parsed[G, O], Meta], StreamEncoder]
    methods: tuple[str, ...] = ("POST",)
    resolve: Resolve[G, O] | None = None
    record: Callable[[Parsed[G, O], Any, StateStore], Awaitable[None]] | None = None
    """Stores the finished response (rendered, or the stream encoder's `final()`)."""
    body: type[BaseModel] | None = None
    """The pydantic model its JSON body is validated with: the request schema of `/openapi.json`."""
    detached: Detached[G, O] | None = None
    """How its requests run in the background, where the protocol has that."""


class DetachedEncoder(StreamEncoder, Protocol):
    """A stream encoder that keeps its events for replay, for requests run detached."""

    def queue(self) -> dict[str, Any]:
        """Opens the stream as queued (those events kept); the object answered at once."""
        ...

    def snapshot(self, status: str, error: LLMError | None = None) -> dict[str, Any]:
        """The object at `status` with the output so far; `cancelled` and `failed` end it."""
        ...

    def kept(self) -> list[dict[str, Any]]:
        """The events made since last asked, as JSON objects carrying their sequence numbers."""
        ...


@dataclass(frozen=True)
class Detached(Generic[G, O]):
    """A route's requests that run on after their HTTP call answered (Responses' `background`):
    the endpoint answers `encoder(...).queue()` at once, stores the object at each status, and
    keeps the encoder's events, which `frames` turns back into stream bytes for a replay."""

    encoder: Callable[[Parsed[G, O], Meta], DetachedEncoder]
    frames: Callable[[Sequence[dict[str, Any]]], bytes]
    media_type: str = "text/event-stream"


class Runs(Protocol):
    """The detached runs (background Responses), as one caller (an API key) sees them."""

    async def cancel(self, key: str) -> dict[str, Any] | None:
        """Stops the run and frees its slot; its object once stopped, or None where it has ended."""
        ...

    def follow(self, key: str, after: int) -> AsyncIterator[dict[str, Any]]:
        """Its events numbered above `after`: those kept, then the rest as they come, to its end."""
        ...


@dataclass(frozen=True)
class Streamed:
    """A state route's answer that is a stream (a background response followed)."""

    media_type: str
    chunks: AsyncIterator[bytes]


@dataclass(frozen=True)
class EmbedRoute(Generic[O]):
    path: str
    parse: Callable[[Any], Parsed[EmbeddingRequest, O]]
    render: Callable[[Parsed[EmbeddingRequest, O], Meta, EmbeddingResult], Any]
    methods: tuple[str, ...] = ("POST",)
    body: type[BaseModel] | None = None
    """The pydantic model its JSON body is validated with: the request schema of `/openapi.json`."""


@dataclass(frozen=True)
class CountRoute(Generic[G, O]):
    """Counts a request's prompt tokens without generating."""

    path: str
    parse: Callable[[Any], Parsed[G, O]]
    render: Callable[[Parsed[G, O], int], Any]
    methods: tuple[str, ...] = ("POST",)
    resolve: Resolve[G, O] | None = None
    body: type[BaseModel] | None = None
    """The pydantic model its JSON body is validated with: the request schema of `/openapi.json`."""


T = TypeVar("T", bound=TokenizerRequest)


@dataclass(frozen=True)
class TokenizerRoute(Generic[T]):
    """Asks a model's tokenizer or chat template, never decoding (llama-server's `/tokenize`).
    A request without a model asks the first one the caller may use."""

    path: str
    parse: Callable[[Any], Parsed[T, None]]
    render: Callable[[Parsed[T, None], TokenizerResult], Any]
    methods: tuple[str, ...] = ("POST",)
    body: type[BaseModel] | None = None
    """The pydantic model its JSON body is validated with: the request schema of `/openapi.json`."""


@dataclass(frozen=True)
class RerankRoute(Generic[O]):
    """Scores documents against a query (`/rerank`), with keys, limits and usage as embeddings."""

    path: str
    parse: Callable[[Any], Parsed[RerankRequest, O]]
    render: Callable[[Parsed[RerankRequest, O], Meta, RerankResult], Any]
    methods: tuple[str, ...] = ("POST",)
    body: type[BaseModel] | None = None
    """The pydantic model its JSON body is validated with: the request schema of `/openapi.json`."""


@dataclass(frozen=True)
class LoraRoute:
    """Lists a model's LoRA adapters (GET) or sets their default scales (POST, operator keys only):
    llama-server's `/lora-adapters`. `parse` reads a POST body; the model is the query's `model`, or
    the first one the caller may use."""

    path: str
    parse: Callable[[Any], tuple[AdapterScale, ...]]
    render: Callable[[str, Sequence[AdapterScale]], Any]
    methods: tuple[str, ...] = ("GET", "POST")
    body: type[BaseModel] | None = None


@dataclass(frozen=True)
class InfoContext:
    catalog: Sequence[ModelCard]
    params: Mapping[str, str]
    headers: Mapping[str, str]  # lower-case names
    body: Any = None  # the decoded JSON body, for POST routes
    query: Mapping[str, str] = field(default_factory=dict)
    runs: Runs | None = None  # the detached runs (background Responses) the caller may see


@dataclass(frozen=True)
class InfoRoute:
    """Answers from the model catalog alone; never waits for a model.

    A `str` reply body is sent as text/plain. With `requires_header`, the route only
    matches requests carrying that header (Anthropic's `/models` beside OpenAI's).
    """

    path: str
    handle: Callable[[InfoContext], Reply]
    methods: tuple[str, ...] = ("GET",)
    requires_header: str | None = None
    body: type[BaseModel] | None = None
    """The pydantic model its JSON body is validated with: the request schema of `/openapi.json`."""


@dataclass(frozen=True)
class StateRoute:
    """Reads or changes stored state (retrieve / delete / cancel a stored response...); no body is read."""

    path: str
    handle: Callable[[InfoContext, StateStore], Awaitable[Reply]]
    methods: tuple[str, ...] = ("GET",)
    body: type[BaseModel] | None = None
    """The pydantic model its JSON body is validated with: the request schema of `/openapi.json`."""


Route = (
    GenerateRoute[Any, Any]
    | EmbedRoute[Any]
    | CountRoute[Any, Any]
    | TokenizerRoute[Any]
    | RerankRoute[Any]
    | LoraRoute
    | InfoRoute
    | StateRoute
)


def required_header(route: Route) -> str | None:
    """The header a request must carry for `route` to match it (only an `InfoRoute` asks for one)."""
    return route.requires_header if isinstance(route, InfoRoute) else None


@dataclass(frozen=True)
class Adapter:
    """One wire protocol: its routes and how it words an error."""

    name: str
    routes: tuple[Route, ...]
    render_error: Callable[[LLMError], Reply]
    signature_header: str | None = None
    """A header that marks a request as this protocol's, to pick the error envelope for unknown routes."""
    tag_error: Callable[[Any, str], Any] = field(default=lambda body, request_id: body)
    """An error body with the request's id put where this protocol's clients tolerate it."""
    request_id_header: str | None = None
    """Where this protocol's own servers send the request id, beside `x-request-id`."""


_LINE_BREAKS = str.maketrans({"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"})


def stream_json(payload: Any) -> str:
    """Compact JSON for one line of a stream (an SSE `data:` field, an NDJSON line): UTF-8 as it
    is, but for U+0085, U+2028 and U+2029, written as `\\u` escapes. JSON lets them stand raw in
    a string, yet Python's `str.splitlines()` ends a line at each (httpx's `iter_lines`, which
    the ollama SDK reads with, does), and a line cut there is no JSON at all."""
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False).translate(_LINE_BREAKS)
