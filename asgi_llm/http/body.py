"""The request body, read once and decoded once, by one decoder.

A layer that must look at the body before the app (auth's model allow-list) reads it ahead,
replays the raw messages to the app inside, and leaves the decoded object in the request
state, so the endpoint never decodes a second time and no two readers can disagree.
"""

from __future__ import annotations

import json
import math
import re
from collections import deque
from collections.abc import Iterable
from typing import Any

from ..core import InvalidRequest, PayloadTooLarge
from .asgi import Message, Receive, Scope, header
from .context import request_context

__all__ = ["MAX_NESTING", "ClientGone", "decode_json", "json_body", "peek_json", "read_body"]

MAX_NESTING = 128
"""JSON levels a request body may nest. Deeper bodies are refused before anything recursive (the
JSON decoder, jsonschema, chat templates) walks them; the deepest tool schema decoding can
enforce fits well within."""

_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")
_TOO_DEEP = f"The request body nests deeper than {MAX_NESTING} levels."
_LONE_SURROGATE = "The request body has a string with a lone UTF-16 surrogate; text must be valid Unicode."
_NOT_JSON = "We could not parse the JSON body of your request: it is not valid JSON."


class ClientGone(Exception):
    """The client disconnected before its request body arrived."""


def _too_large(limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(f"The request body is larger than the limit of {limit} bytes.")


async def read_body(scope: Scope, receive: Receive, limit: int) -> bytes:
    declared = header(scope, b"content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object whose keys are all different: with a repeated key, two readers of one body
    (a proxy that takes the first, a decoder that takes the last) could disagree."""
    data = dict(pairs)
    if len(data) != len(pairs):
        seen: set[str] = set()
        repeated = next(key for key, _ in pairs if key in seen or seen.add(key))  # type: ignore[func-returns-value]
        raise InvalidRequest(f"The request body has the key '{repeated[:100]}' twice in one object; send it once.")
    return data


def _no_constant(name: str) -> Any:
    """`NaN`, `Infinity` and `-Infinity`, which Python's decoder takes but JSON has not: refused
    here, so no sampler or limit ever sees a number that compares false with everything."""
    raise InvalidRequest(f"The request body holds {name}, which is not a JSON number; send a finite number.")


def _finite(text: str) -> float:
    number = float(text)
    if math.isinf(number):
        raise InvalidRequest(f"The number {text[:40]} in the request body is too large for a double; send a smaller one.")
    return number


def decode_json(body: bytes) -> dict[str, Any]:
    try:
        data = json.loads(body, object_pairs_hook=_unique_keys, parse_constant=_no_constant, parse_float=_finite)
    except RecursionError:
        raise InvalidRequest(_TOO_DEEP) from None
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise InvalidRequest(_NOT_JSON) from None
    except ValueError:  # an integer of more digits than Python converts
        raise InvalidRequest("The request body holds a number with too many digits.") from None
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


async def json_body(scope: Scope, receive: Receive, limit: int) -> dict[str, Any]:
    """The request's JSON object: as an outer layer decoded it, or read and decoded now."""
    context = request_context(scope)
    if context.body is None:
        context.body = decode_json(await read_body(scope, receive, limit))
    return context.body


async def peek_json(scope: Scope, receive: Receive, limit: int) -> tuple[dict[str, Any] | None, Receive]:
    """Reads and decodes the body ahead of the app, and a `receive` that replays every message
    read here, unchanged, before reading on (so any ASGI app inside still gets the body).

    None when the client left first (the app will see it too). Raises `PayloadTooLarge` or the
    decoder's `InvalidRequest`: the same refusal the endpoint would give.
    """
    read: deque[Message] = deque()

    async def recording() -> Message:
        message = await receive()
        read.append(message)
        return message

    async def replay() -> Message:
        return read.popleft() if read else await receive()

    try:
        body = await json_body(scope, recording, limit)
    except ClientGone:
        return None, replay
    return body, replay
