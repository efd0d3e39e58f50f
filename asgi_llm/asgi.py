"""Minimal typed ASGI helpers: reading a bounded body, sending JSON and stream parts."""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

from .core import InvalidRequest, PayloadTooLarge

__all__ = [
    "MAX_NESTING",
    "ASGIApp",
    "Message",
    "Receive",
    "Scope",
    "Send",
    "decode_json",
    "header",
    "read_body",
    "send_json",
    "send_text",
    "start_stream",
]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None


class ClientGone(Exception):
    """The client disconnected before its request body arrived."""


async def read_body(scope: Scope, receive: Receive, limit: int) -> bytes:
    declared = header(scope, b"content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"The request body is larger than the limit of {limit} bytes.")
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"The request body is larger than the limit of {limit} bytes.")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


MAX_NESTING = 128
"""JSON levels a request body may nest. Deeper bodies are refused before anything recursive (the
JSON decoder, jsonschema, chat templates) walks them; the deepest tool schema decoding can
enforce fits well within."""

_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")
_TOO_DEEP = f"The request body nests deeper than {MAX_NESTING} levels."
_LONE_SURROGATE = "The request body has a string with a lone UTF-16 surrogate; text must be valid Unicode."


def decode_json(body: bytes) -> dict[str, Any]:
    try:
        data = json.loads(body)
    except RecursionError:
        raise InvalidRequest(_TOO_DEEP) from None
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise InvalidRequest(
            "We could not parse the JSON body of your request: it is not valid JSON."
        ) from None
    if not isinstance(data, dict):
        raise InvalidRequest("The request body must be a JSON object.")
    _check_shape(data, strings=_SURROGATE_ESCAPE.search(body) is not None)
    return data


def _check_shape(data: Any, *, strings: bool) -> None:
    """Refuses what parses as JSON yet would fail deep inside: nesting past `MAX_NESTING`, and
    (when the body escapes one) a lone UTF-16 surrogate such as `"\\ud800"`, which no UTF-8
    text can hold. Iterative, so no body can exhaust the stack here."""
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        value, level = stack.pop()
        if isinstance(value, dict):
            if strings and any(_SURROGATE.search(key) for key in value):
                raise InvalidRequest(_LONE_SURROGATE)
            items: Iterable[Any] = value.values()
        elif isinstance(value, list):
            items = value
        else:
            if strings and isinstance(value, str) and _SURROGATE.search(value):
                raise InvalidRequest(_LONE_SURROGATE)
            continue
        if level == MAX_NESTING and any(isinstance(item, (dict, list)) for item in items):
            raise InvalidRequest(_TOO_DEEP)
        stack.extend((item, level + 1) for item in items if strings or isinstance(item, (dict, list)))


def _headers(extra: Iterable[tuple[str, str]]) -> list[tuple[bytes, bytes]]:
    return [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in extra]


async def send_json(send: Send, status: int, payload: Any, headers: Iterable[tuple[str, str]] = ()) -> None:
    body = json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *_headers(headers),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def send_text(send: Send, status: int, text: str) -> None:
    body = text.encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def start_stream(send: Send, media_type: str) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [
                (b"content-type", media_type.encode() + b"; charset=utf-8"),
                (b"cache-control", b"no-cache"),
                (b"x-accel-buffering", b"no"),
            ],
        }
    )
