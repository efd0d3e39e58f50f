"""What OpenAI's endpoints share: the error envelope, SSE framing, usage and logprobs shapes."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, TypedDict

from asgi_llm.core import LLMError, TokenLogprob, Usage

from .base import Reply

__all__ = [
    "ErrorBody",
    "render_error",
    "sse",
    "SSE_DONE",
    "usage_dict",
    "chat_logprobs",
    "stop_list",
]

SSE_DONE = b"data: [DONE]\n\n"

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    503: "server_error",
}


class ErrorDetail(TypedDict):
    message: str
    type: str
    param: str | None
    code: str | None


class ErrorBody(TypedDict):
    error: ErrorDetail


def render_error(error: LLMError) -> Reply:
    detail: ErrorDetail = {
        "message": error.message,
        "type": _ERROR_TYPES.get(error.status, "server_error"),
        "param": error.param,
        "code": error.code,
    }
    body: ErrorBody = {"error": detail}
    return error.status, body


def sse(payload: Any) -> bytes:
    """One `data:` event; compact JSON keeps per-token overhead low."""
    return b"data: " + json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode() + b"\n\n"


def usage_dict(usage: Usage) -> dict[str, Any]:
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_tokens},
        "completion_tokens_details": {"reasoning_tokens": 0},
    }


def chat_logprobs(tokens: Sequence[TokenLogprob]) -> list[dict[str, Any]]:
    return [
        {
            "token": t.token,
            "logprob": t.logprob,
            "bytes": list(t.bytes),
            "top_logprobs": [{"token": o.token, "logprob": o.logprob, "bytes": list(o.bytes)} for o in t.top],
        }
        for t in tokens
    ]


def stop_list(stop: str | Sequence[str] | None) -> tuple[str, ...]:
    if stop is None:
        return ()
    return (stop,) if isinstance(stop, str) else tuple(stop)
