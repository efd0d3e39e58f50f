"""An upstream's error answers as neutral core errors. Pure.

The client sees our error, in its own protocol's envelope, never the upstream's body as is:
a request the upstream finds wrong stays the client's 400 (with the upstream's message, any
secret cut out); a 429 keeps its `Retry-After`; the upstream refusing *our* key is our fault,
so a 502, never a 401 the client would take for its own key; 5xx answers are 502, an upstream
that cannot be reached is a 503, one that is too slow a 504.
"""

from __future__ import annotations

import email.utils
import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

from ...core.errors import (
    BadGateway,
    ContextOverflow,
    GatewayTimeout,
    InvalidRequest,
    LLMError,
    PayloadTooLarge,
    RateLimited,
    Unavailable,
)

__all__ = ["error_from_body", "error_from_response", "retry_after", "retryable", "scrub"]

_MAX_MESSAGE = 500


def retryable(status: int) -> bool:
    """Whether another replica may answer where this one gave `status`."""
    return status in (408, 429, 500, 502, 503, 504)


def error_from_response(
    status: int, headers: Mapping[str, str], body: bytes, *, secrets: Iterable[str] = (), now: float
) -> LLMError:
    """The error for an upstream's non-200 answer; `headers` with lower-case names."""
    try:
        parsed: Any = json.loads(body) if body else None
    except ValueError:
        parsed = None
    message, param, code = _detail(parsed)
    message = scrub(message, secrets)
    wait = retry_after(headers.get("retry-after"), now)
    if status == 429:
        return RateLimited(message or "The upstream server is rate limiting requests; retry shortly.", retry_after=wait)
    if status in (401, 403):
        return BadGateway("The upstream server refused this gateway's credentials.")
    if status == 404:
        return BadGateway("The upstream server does not serve this model or endpoint.")
    if status == 413:
        return PayloadTooLarge(message or "The request is too large for the upstream server.")
    if status in (408, 504):
        return GatewayTimeout("The upstream server timed out.")
    if status == 503:
        return Unavailable("The upstream server is unavailable; retry shortly.", retry_after=wait)
    if 400 <= status < 500:
        if code == "context_length_exceeded" or "context length" in message.lower():
            return ContextOverflow(message, param=param or "messages")
        return InvalidRequest(message or f"The upstream server rejected the request ({status}).", param=param)
    return BadGateway(f"The upstream server failed ({status}).")


def error_from_body(body: Mapping[str, Any], *, secrets: Iterable[str] = ()) -> LLMError:
    """An error the upstream sent inside its stream (`data: {"error": ...}`) after a 200."""
    message, _, _ = _detail(body)
    message = scrub(message, secrets)
    return BadGateway(
        f"The upstream server failed while generating: {message}" if message else "The upstream server failed."
    )


def retry_after(value: str | None, now: float, default: int = 1) -> int:
    """Whole seconds from a `Retry-After` header: a number of seconds or an HTTP date."""
    if not value:
        return default
    try:
        return max(0, math.ceil(float(value)))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return default
    return max(0, math.ceil(when.timestamp() - now))


def scrub(text: str, secrets: Iterable[str]) -> str:
    """`text` without any secret (keys, credentialled URLs) in it, cut to a readable length."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "[redacted]")
    return text[:_MAX_MESSAGE]


def _detail(body: Any) -> tuple[str, str | None, str | None]:
    """Message, param and code from the shapes servers use: OpenAI's `{"error": {...}}`, a bare
    `{"error": "..."}` (Ollama, vLLM), FastAPI's `{"detail": ...}`, `{"message": ...}`."""
    if not isinstance(body, Mapping):
        return "", None, None
    error = body.get("error", body)
    if isinstance(error, str):
        return error, None, None
    if not isinstance(error, Mapping):
        return "", None, None
    message = error.get("message", error.get("detail", ""))
    if not isinstance(message, str):
        message = json.dumps(message)[:_MAX_MESSAGE]
    param, code = error.get("param"), error.get("code")
    return message, param if isinstance(param, str) else None, code if isinstance(code, str) else None
