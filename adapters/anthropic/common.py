"""What Anthropic's endpoints share: the request models' base and `cache_control` shape, the error
envelope and named SSE events."""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict

from pydantic import BaseModel, ConfigDict

from asgi_llm.core import LLMError, Unsupported

from ..base import Reply, stream_json

__all__ = [
    "ErrorBody",
    "ThreadsUnsupported",
    "Wire",
    "WireCacheControl",
    "render_error",
    "sse",
    "tag_error",
    "tool_use_id",
]


class Wire(BaseModel):
    """Every request model's base: strict types, unknown fields kept to be refused by name."""

    model_config = ConfigDict(extra="allow", strict=True)


class WireCacheControl(Wire):
    """A prompt-caching breakpoint, at the top level or on a block or tool: one shape everywhere."""

    type: Literal["ephemeral"]
    ttl: Literal["5m", "1h"] | None = None


_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "overloaded_error",  # Anthropic answers 529; we keep the standard status
}


class ThreadsUnsupported(Unsupported):
    """A request's `thread` (server-held conversations, a beta): refused with the `details` by
    which the SDK's threads and tool runner fall back to sending the whole conversation."""


class ErrorDetail(TypedDict):
    type: str
    message: str
    details: NotRequired[dict[str, Any]]


class ErrorBody(TypedDict):
    type: Literal["error"]
    error: ErrorDetail


def tool_use_id(call_id: str) -> str:
    """Anthropic's tool-use ids start `toolu_` (clients and proxies match on it); a core call id
    keeps its unique part. A client's own ids come back unchanged in its tool results."""
    return call_id if call_id.startswith("toolu_") else "toolu_" + call_id.removeprefix("call_")


def render_error(error: LLMError) -> Reply:
    """Anthropic's envelope has no `param`; like Anthropic's own messages, ours lead with it."""
    fallback = "invalid_request_error" if error.status < 500 else "api_error"
    message = error.message
    if error.param and f"'{error.param}'" not in message:
        message = f"{error.param}: {message}"
    detail: ErrorDetail = {"type": _ERROR_TYPES.get(error.status, fallback), "message": message}
    if isinstance(error, ThreadsUnsupported):  # no one field is at fault: none is listed as `unsupported`
        detail["details"] = {"error_code": "thread_unsupported_request", "unsupported": []}
    return error.status, {"type": "error", "error": detail}


def tag_error(body: Any, request_id: str) -> Any:
    """A top-level `request_id`, where Anthropic's own error bodies carry it."""
    return {**body, "request_id": request_id} if isinstance(body, dict) else body


def sse(payload: dict[str, Any] | ErrorBody) -> bytes:
    """One named event; the name repeats the payload's `type`, as Anthropic's streams do."""
    data = stream_json(payload)
    return f"event: {payload['type']}\ndata: {data}\n\n".encode()
