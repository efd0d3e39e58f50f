"""What the layers share about one request: one `RequestContext`, in `scope["state"]` under `CONTEXT`.

`LLMApp` fills it in when a request arrives (its route match and `RequestInfo`: protocol, route,
error envelope); a layer wrapped around any other ASGI app classifies with the `classify` it was
given, or plainly. The auth layer names the caller, the limits layer caps the tokens, the body is
decoded into it once, and the endpoint reports tokens into its `Meter`. The request's id, and the
`x-request-id` header that carries it, are owned here: `with_request_id_header` is the one
`send` wrapper that adds it.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from ..core import Finish, GenerationEvent, LLMError, RetryLater, Unauthorized, Usage
from ..core.policy import KeyInfo
from ..wire import openai_error
from .asgi import Message, Scope, Send, header, send_json
from .routing import Match, route_path
from .trace_notes import TraceNotes

__all__ = [
    "CONTEXT",
    "KEY",
    "KEY_INFO",
    "Classify",
    "InProcessCall",
    "Meter",
    "Reply",
    "RequestContext",
    "RequestInfo",
    "attach",
    "identify",
    "meter_of",
    "new_request_id",
    "plain_request",
    "render_plain_error",
    "request_context",
    "request_info",
    "send_error",
    "tag_plain_error",
    "with_request_id_header",
]

Reply = tuple[int, Any]
"""A status and a JSON-able body: what a protocol's `render_error` gives."""

CONTEXT = "asgi_llm.context"
"""The `scope["state"]` key of the request's `RequestContext`."""
KEY = "asgi_llm.key"
"""For the host's own code inside the layers: the authenticated key's *name* (never the key);
absent on public routes and without auth. Our layers read `RequestContext.key` instead."""
KEY_INFO = "asgi_llm.key_info"
"""For the host's own code inside the layers: the authenticated key's `KeyInfo`."""


@dataclass
class InProcessCall:
    """A request from host code in this process. It runs through the same layers as one over
    HTTP (usage, limits, the key's model allow-list), under an identity the host chose; the
    endpoint hands its core events to `deliver` instead of encoding them, and an error is kept
    here as raised, beside the envelope the layers send."""

    deliver: Callable[[Any], Awaitable[None]]
    model: str | None = None
    error: LLMError | None = None

    def serving(self, model_id: str) -> None:
        """The model that serves it (the last one tried, through a fallback chain)."""
        self.model = model_id


@dataclass(frozen=True)
class RequestInfo:
    """How the app sees a request: which protocol, which route, how its errors look."""

    protocol: str
    path: str
    """The path below the mount point (`root_path` removed), no trailing slash."""
    endpoint: str
    """The route's template (`/models/{model:path}`) or `unmatched`: a bounded metrics label."""
    render_error: Callable[[LLMError], Reply]
    resolve_model: Callable[[str], str | None] = field(default=lambda name: name)
    """A model name or alias → its canonical id (plain apps: the name itself), or None when unknown."""
    tag_error: Callable[[Any, str], Any] = field(default=lambda body, request_id: tag_plain_error(body, request_id))
    """An error body with the request's id put where the protocol's clients tolerate it."""
    request_id_header: str | None = None
    """Where this protocol's own servers send the request id, beside `x-request-id`."""


Classify = Callable[[Scope], RequestInfo]


@dataclass
class RequestContext:
    """Everything the layers and the endpoint share about one request, in one typed place."""

    request_id: str
    """The id this request goes by in responses, usage records and logs: the client's
    `x-request-id` when it is a plain token of up to 128 characters, else a new `req_…`."""
    info: RequestInfo | None = None
    """How the app sees the request (`request_info`); a layer may rename its `endpoint`."""
    match: Match[Any] | None = None
    """`LLMApp`'s route match, made once when the request arrives, for its endpoint."""
    key: KeyInfo | None = None
    """The authenticated caller (`identify`); None on public routes and without auth."""
    body: dict[str, Any] | None = None
    """The decoded JSON body, once a layer has read it (see `http.body`): decoded once per request."""
    meter: Meter | None = None
    """The request's tokens, filled in by the endpoint; placed by the outermost layer that reads it."""
    max_tokens: int | None = None
    """A cap on generated tokens the endpoint applies to the parsed request (limits layer)."""
    in_process: InProcessCall | None = None
    """Set for a request made by host code in this process (`LLMApp.client`); None over HTTP."""
    id_header: bool = False
    """Whether a `send` wrapper already adds `x-request-id` (see `with_request_id_header`)."""
    trace: TraceNotes | None = None
    """Set by the tracing layer while its span records: the endpoint reports the request to it."""


def _state(scope: Scope) -> MutableMapping[str, Any]:
    """The per-request state dict (servers copy the lifespan state into each request's scope)."""
    state: MutableMapping[str, Any] = scope.setdefault("state", {})
    return state


_USABLE_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")


def request_context(scope: Scope) -> RequestContext:
    """The request's context, made by the first part to ask (the id read from the request then)."""
    state = _state(scope)
    context: RequestContext | None = state.get(CONTEXT)
    if context is None:
        given = header(scope, b"x-request-id") or ""
        context = state[CONTEXT] = RequestContext(given if _USABLE_ID.fullmatch(given) else new_request_id())
    return context


def attach(scope: Scope, context: RequestContext) -> None:
    """`context`, made beforehand (a request from host code), becomes the request's."""
    _state(scope)[CONTEXT] = context
    identify(scope, context.key)


def identify(scope: Scope, key: KeyInfo | None) -> None:
    """The request's caller, for the layers inside; its name and `KeyInfo` also go under `KEY`
    and `KEY_INFO`, where the host's own code reads them."""
    request_context(scope).key = key
    if key is not None:
        state = _state(scope)
        state[KEY], state[KEY_INFO] = key.name, key


def new_request_id() -> str:
    return f"req_{uuid.uuid4().hex[:24]}"


def render_plain_error(error: LLMError) -> Reply:
    """OpenAI's envelope, for layers around apps that have no protocol of their own."""
    return error.status, openai_error.error_body(error.status, error.message, error.param, error.code)


def tag_plain_error(body: Any, request_id: str) -> Any:
    """The request id inside OpenAI's error object (see `render_plain_error`)."""
    return openai_error.tag_error(body, request_id)


def plain_request(scope: Scope) -> RequestInfo:
    path = route_path(scope)
    return RequestInfo(protocol="http", path=path, endpoint=path, render_error=render_plain_error)


def request_info(scope: Scope, classify: Classify | None = None) -> RequestInfo:
    context = request_context(scope)
    if context.info is None:
        context.info = (classify or plain_request)(scope)
    return context.info


def with_request_id_header(scope: Scope, send: Send) -> Send:
    """`send` that gives the response's start the request's `x-request-id` (unless it has one)
    and the same id under the protocol's own header name (`RequestInfo.request_id_header`, read
    as the response starts). The first part to ask wraps `send`; later ones get it back as it
    is, so however many layers ask, one wrapper adds the header."""
    context = request_context(scope)
    if context.id_header:
        return send
    context.id_header = True

    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = _with_id_headers(message, context)
        await send(message)

    return sending


def _with_id_headers(message: Message, context: RequestContext) -> Message:
    also = context.info.request_id_header if context.info is not None else None
    names = [b"x-request-id", *([also.encode("latin-1")] if also else [])]
    headers = list(message.get("headers", ()))
    present = {bytes(name).lower() for name, _ in headers}
    added = [(name, context.request_id.encode("latin-1")) for name in names if name not in present]
    return {**message, "headers": [*headers, *added]}


async def send_error(
    scope: Scope, send: Send, info: RequestInfo, error: LLMError, headers: Iterable[tuple[str, str]] = ()
) -> None:
    """The error in the calling protocol's envelope with the request's id in it, and
    `Retry-After` / `WWW-Authenticate` where they apply."""
    context = request_context(scope)
    if context.in_process is not None:
        context.in_process.error = error
    status, body = info.render_error(error)
    body = info.tag_error(body, context.request_id)
    headers = list(headers)
    if isinstance(error, RetryLater):
        headers.append(("retry-after", str(error.retry_after)))
    if isinstance(error, Unauthorized):
        headers.append(("www-authenticate", "Bearer"))
    await send_json(send, status, body, headers)


class Meter:
    """One request's model, tokens and first-token time, reported by the endpoint as they happen.

    A choice that never finishes (the client left mid-stream) counts one completion token per
    delta it produced, since its exact count never arrives.
    """

    def __init__(self, timer: Callable[[], float] = time.perf_counter) -> None:
        self._timer = timer
        self.model: str | None = None
        self.first_token_at: float | None = None
        self._usage = Usage(0, 0, 0)
        self._unfinished: dict[int, int] = {}
        self.failed: int | None = None
        """The status of an error that ended a stream after its 200 went out (an in-stream error
        event), for the usage record: the wire can no longer say it."""

    def serving(self, model_id: str) -> None:
        self.model = model_id

    def fail(self, status: int) -> None:
        """A stream whose 200 went out ended with an error of `status` (see `failed`)."""
        self.failed = status

    def event(self, event: GenerationEvent) -> None:
        if self.first_token_at is None:
            self.first_token_at = self._timer()
        if isinstance(event, Finish):
            self._unfinished.pop(event.index, None)
            self.usage(event.usage)
        else:
            self._unfinished[event.index] = self._unfinished.get(event.index, 0) + 1

    def usage(self, usage: Usage) -> None:
        self._usage = _add(self._usage, usage)

    @property
    def total(self) -> Usage:
        return _add(self._usage, Usage(0, sum(self._unfinished.values()), 0))


def _add(a: Usage, b: Usage) -> Usage:
    return Usage(
        a.prompt_tokens + b.prompt_tokens,
        a.completion_tokens + b.completion_tokens,
        a.cached_tokens + b.cached_tokens,
        a.reasoning_tokens + b.reasoning_tokens,
    )


def meter_of(scope: Scope, timer: Callable[[], float] = time.perf_counter) -> Meter:
    """The request's meter, placed by the outermost layer that needs one."""
    context = request_context(scope)
    if context.meter is None:
        context.meter = Meter(timer)
    return context.meter
