"""A lingering close: a request refused before its body was read has its answer sent at once,
and the rest of its body read and dropped (for at most `LINGER_SECONDS`) before the answer ends.

A 413 for a Content-Length over `max_body_bytes`, or a 401 before auth reads the body, goes out
while the client is still sending. A server that closes the connection once the response ends
resets it under the client's upload, and clients then report "connection reset" instead of
the answer. uvicorn drains a kept-alive connection on its own, but closes at once when the
client sent `Connection: close` (Python's urllib does) or spoke HTTP/1.0; and once a response
has ended, an ASGI app can read no more of the request (uvicorn answers `http.disconnect`). So
the refusal's bytes go out as the app sends them, while its last message is held back: the
response stays open until the body has been read to its end, then ends, and the server closes
a connection with nothing left unread. Like nginx's `lingering_time`, the bound is a time,
whatever the body's size: the client sends as fast as it can, and is answered either way.
"""

from __future__ import annotations

import contextlib

import anyio
import anyio.lowlevel

from .asgi import ASGIApp, Message, Receive, Scope, Send, header

__all__ = ["LINGER_SECONDS", "serve_lingering"]

LINGER_SECONDS = 5.0


async def serve_lingering(app: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
    """`app` on this request; where it answers 4xx with the body unread, the answer's last
    message waits until the rest of the body is read and dropped, or `LINGER_SECONDS` pass."""
    ended = not _has_body(scope)
    status = 0
    held = False

    async def tracked_receive() -> Message:
        nonlocal ended
        message = await receive()
        if message["type"] != "http.request" or not message.get("more_body", False):
            ended = True
        return message

    async def tracked_send(message: Message) -> None:
        nonlocal status, held
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message["type"] == "http.response.body" and not message.get("more_body", False):
            held = not ended and 400 <= status < 500
            if held:  # every byte of the answer goes now; its end once the body is read
                message = {**message, "more_body": True}
        await send(message)

    await app(scope, tracked_receive, tracked_send)
    if held:
        await _drain(receive)
        with contextlib.suppress(OSError):  # the client left meanwhile (ASGI servers raise OSError then)
            await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _drain(receive: Receive) -> None:
    with anyio.move_on_after(LINGER_SECONDS):
        while True:
            message = await receive()
            if message["type"] != "http.request" or not message.get("more_body", False):
                return
            await anyio.lowlevel.checkpoint()  # a server whose body is all there answers without waiting


def _has_body(scope: Scope) -> bool:
    length = header(scope, b"content-length")
    return (length is not None and length.strip() not in ("", "0")) or header(scope, b"transfer-encoding") is not None
