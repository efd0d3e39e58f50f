"""What the layers share about one request, kept in `scope["state"]` under `asgi_llm.*` names.

`LLMApp` classifies each request (protocol, route, error envelope) before its layers run and
leaves a `RequestInfo` there; a layer wrapped around any other ASGI app classifies with the
`classify` it was given, or plainly. The endpoint reports tokens into the request's `Meter`
and honours a `max_tokens` cap left by the limits layer.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from ..core import Finish, GenerationEvent, LLMError, RetryLater, Unauthorized, Usage
from .asgi import Message, Scope, Send, header, send_json
from .routing import route_path

__all__ = [
    "BODY",
    "IN_PROCESS",
    "KEY",
    "KEY_INFO",
    "MAX_TOKENS",
    "REQUEST",
    "REQUEST_ID",
    "USAGE",
    "Classify",
    "InProcessCall",
    "Meter",
    "Reply",
    "RequestInfo",
    "in_process",
    "meter_of",
    "new_request_id",
    "plain_request",
    "render_plain_error",
    "request_id",
    "request_info",
    "request_state",
    "send_error",
    "tag_plain_error",
    "with_request_id_header",
]

Reply = tuple[int, Any]
"""A status and a JSON-able body: what a protocol's `render_error` gives."""

REQUEST = "asgi_llm.request"
"""The request's `RequestInfo`."""
KEY = "asgi_llm.key"
"""The authenticated key's *name* (never the key itself); absent on public routes and without auth."""
KEY_INFO = "asgi_llm.key_info"
"""The authenticated key's `KeyInfo`: its name, allow-lists and limits."""
USAGE = "asgi_llm.usage"
"""The request's `Meter`, filled in by the endpoint."""
REQUEST_ID = "asgi_llm.request_id"
"""The request's id (`x-request-id`): the client's, when it sent a usable one, or a new one."""
BODY = "asgi_llm.body"
"""The decoded JSON body, once a layer has read it (see `http.body`): decoded once per request."""
MAX_TOKENS = "asgi_llm.max_tokens"
"""A cap on generated tokens the endpoint applies to the parsed request (limits layer)."""
IN_PROCESS = "asgi_llm.in_process"
"""The `InProcessCall` of a request made by host code in this process (`LLMApp.client`)."""


@dataclass
class InProcessCall:
    """A request from host code in this process. It runs through the same layers as one over
    HTTP (usage, limits, the key's model allow-list), under an identity the host chose; the
    endpoint hands its core events to `deliver` instead of encoding them, and an error is kept
    here as raised, beside the envelope the layers send."""

    deliver: Callable[[Any], Awaitable[None]]
    model: str | None = None
    error: LLMError | None = None


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


Classify = Callable[[Scope], RequestInfo]


def render_plain_error(error: LLMError) -> Reply:
    """An OpenAI-shaped envelope, for layers around apps that have no protocol of their own."""
    return error.status, {
        "error": {"message": error.message, "type": error.code, "param": error.param, "code": error.code}
    }


def tag_plain_error(body: Any, request_id: str) -> Any:
    """The request id inside the OpenAI-shaped error object (see `render_plain_error`)."""
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        return {**body, "error": {**body["error"], "request_id": request_id}}
    return body


def plain_request(scope: Scope) -> RequestInfo:
    path = route_path(scope)
    return RequestInfo(protocol="http", path=path, endpoint=path, render_error=render_plain_error)


def request_state(scope: Scope) -> MutableMapping[str, Any]:
    """The per-request state dict (servers copy the lifespan state into each request's scope)."""
    state: MutableMapping[str, Any] = scope.setdefault("state", {})
    return state


_USABLE_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")


def request_id(scope: Scope) -> str:
    """The id this request goes by in responses, usage records and logs: the client's
    `x-request-id` when it is a plain token of up to 128 characters, else a new `req_…`."""
    state = request_state(scope)
    found: str | None = state.get(REQUEST_ID)
    if found is None:
        given = header(scope, b"x-request-id") or ""
        found = state[REQUEST_ID] = given if _USABLE_ID.fullmatch(given) else new_request_id()
    return found


def new_request_id() -> str:
    return f"req_{uuid.uuid4().hex[:24]}"


def in_process(scope: Scope) -> InProcessCall | None:
    """The request's `InProcessCall`; None for every request that came over HTTP."""
    call: InProcessCall | None = request_state(scope).get(IN_PROCESS)
    return call


def with_request_id_header(send: Send, request_id: str, also: str | None = None) -> Send:
    """`send` that gives the response's start an `x-request-id` (unless it has one), and the
    same id under the protocol's own header name `also`."""
    names = [b"x-request-id", *([also.encode("latin-1")] if also else [])]

    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = list(message.get("headers", ()))
            present = {bytes(name).lower() for name, _ in headers}
            added = [(name, request_id.encode("latin-1")) for name in names if name not in present]
            message = {**message, "headers": [*headers, *added]}
        await send(message)

    return sending


def request_info(scope: Scope, classify: Classify | None = None) -> RequestInfo:
    state = request_state(scope)
    info: RequestInfo | None = state.get(REQUEST)
    if info is None:
        info = (classify or plain_request)(scope)
        state[REQUEST] = info
    return info


async def send_error(
    scope: Scope, send: Send, info: RequestInfo, error: LLMError, headers: Iterable[tuple[str, str]] = ()
) -> None:
    """The error in the calling protocol's envelope with the request's id in it, and
    `Retry-After` / `WWW-Authenticate` where they apply."""
    call = in_process(scope)
    if call is not None:
        call.error = error
    status, body = info.render_error(error)
    body = info.tag_error(body, request_id(scope))
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
    state = request_state(scope)
    meter: Meter | None = state.get(USAGE)
    if meter is None:
        meter = state[USAGE] = Meter(timer)
    return meter
