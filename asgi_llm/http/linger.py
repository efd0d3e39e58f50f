"""A lingering close: a request refused before its body was read has the rest of its body read
and dropped (within a bound) before the app returns.

A 413 for a Content-Length over `max_body_bytes`, or a 401 before auth reads the body, goes out
while the client is still sending. A server that closes the connection as soon as the app
returns resets it under the client's upload, and clients (httpx, requests) then report
"connection reset" instead of the answer. Reading on until the body ends, at most `2 ×
max_body_bytes` or `LINGER_SECONDS`, lets them read it. uvicorn drains on its own; other servers
do not.
"""

from __future__ import annotations

import anyio

from .asgi import ASGIApp, Message, Receive, Scope, Send, header

__all__ = ["LINGER_SECONDS", "serve_lingering"]

LINGER_SECONDS = 5.0


async def serve_lingering(app: ASGIApp, scope: Scope, receive: Receive, send: Send, limit: int) -> None:
    """`app` on this request; then, if it answered 4xx with the body unread, read on (and drop)
    up to `2 × limit` bytes or `LINGER_SECONDS`, whichever comes first."""
    ended = not _has_body(scope)
    status = 0

    async def tracked_receive() -> Message:
        nonlocal ended
        message = await receive()
        if message["type"] != "http.request" or not message.get("more_body", False):
            ended = True
        return message

    async def tracked_send(message: Message) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        await send(message)

    await app(scope, tracked_receive, tracked_send)
    if not ended and 400 <= status < 500:
        await _drain(receive, 2 * limit)


async def _drain(receive: Receive, bound: int) -> None:
    read = 0
    with anyio.move_on_after(LINGER_SECONDS):
        while read <= bound:
            message = await receive()
            if message["type"] != "http.request":
                return
            read += len(message.get("body", b""))
            if not message.get("more_body", False):
                return


def _has_body(scope: Scope) -> bool:
    length = header(scope, b"content-length")
    return (length is not None and length.strip() not in ("", "0")) or header(scope, b"transfer-encoding") is not None
