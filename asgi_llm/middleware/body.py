"""Looking at a request body without taking it from the app: read it, then replay it.

Only request bodies are read ahead (bounded by a limit); responses are never buffered.
"""

from __future__ import annotations

import json
from collections import deque
from typing import Any, NamedTuple

from asgi_llm.asgi import Message, Receive

__all__ = ["Peek", "peek_json"]


class Peek(NamedTuple):
    value: Any
    """The decoded JSON body; None if it is not JSON, too large, or the client left."""
    too_large: bool
    receive: Receive
    """Hands the app every message read here, unchanged, before reading on."""


async def peek_json(receive: Receive, limit: int) -> Peek:
    read: deque[Message] = deque()
    size = 0
    body: bytes | None = None
    while True:
        message = await receive()
        read.append(message)
        if message["type"] != "http.request":
            break  # the client left: the app will see it too
        size += len(message.get("body", b""))
        if size > limit:
            break
        if not message.get("more_body", False):
            body = b"".join(m.get("body", b"") for m in read)
            break

    async def replay() -> Message:
        return read.popleft() if read else await receive()

    return Peek(_decode(body), size > limit, replay)


def _decode(body: bytes | None) -> Any:
    if body is None:
        return None
    try:
        return json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
