"""A streamed response under uvicorn ends with its last event and leaves its connection kept
alive, answering the next request on it at once while other streams run (#37).

A client that sends its next request on the same connection waits for the body's end (the
chunked `0\\r\\n\\r\\n`) first: were the end held back (behind usage accounting, a disconnect
watcher), every kept-alive client would pay it before its next request left. The 5 s cluster
issue 37 saw at 128 clients was the client's pool (benchmarks/_server.py, `shared_pool_limits`);
this holds the server's half.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import AsyncGenerator

import anyio
import pytest

from asgi_llm import LLMApp, ModelConfig, ModelPool, Settings
from asgi_llm.adapters.openai import OPENAI
from asgi_llm.core import EngineEvent, GenerationRequest, TextDelta
from asgi_llm.engines.fake import FakeEngine

from ..test_http.uvicorn_thread import uvicorn_serving

pytestmark = pytest.mark.slow  # it starts uvicorn


class HeldEngine(FakeEngine):
    """Streams whose user message is "hold" wait on `release` after each piece of text."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__(config)
        self.release = threading.Event()

    async def _events(self, request: GenerationRequest) -> AsyncGenerator[EngineEvent, None]:
        held = "'hold'" in repr(request)
        async for event in super()._events(request):
            yield event
            while held and isinstance(event, TextDelta) and not self.release.is_set():
                await anyio.sleep(0.01)


def request(content: str) -> bytes:
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": content}], "stream": True}).encode()
    head = f"POST /chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
    return head.encode() + body


def read_response(sock: socket.socket) -> tuple[bytes, float]:
    """One chunked response's bytes, and the seconds from its `data: [DONE]` to its last byte."""
    data, done_at = b"", 0.0
    while not data.endswith(b"\r\n0\r\n\r\n"):
        chunk = sock.recv(65536)
        assert chunk, f"the server closed the connection: {data[-200:]!r}"
        data += chunk
        if not done_at and b"data: [DONE]" in data:
            done_at = time.monotonic()
    return data, time.monotonic() - done_at


def test_a_stream_ends_with_its_last_event_and_its_connection_serves_the_next_at_once() -> None:
    engines: list[HeldEngine] = []

    def factory(config: ModelConfig, thread: object) -> HeldEngine:
        engines.append(HeldEngine(config))
        return engines[-1]

    settings = Settings(models=(ModelConfig(id="m", path="unused.gguf"),))
    app = LLMApp(pool=ModelPool(settings, engine_factory=factory), adapters=(OPENAI,))
    with uvicorn_serving(app) as url, contextlib.ExitStack() as stack:
        port = int(url.rsplit(":", 1)[1])
        others = [stack.enter_context(socket.create_connection(("127.0.0.1", port), timeout=10)) for _ in range(8)]
        for other in others:  # streams left open, as other clients' are
            other.sendall(request("hold"))
        for other in others:
            assert other.recv(65536).startswith(b"HTTP/1.1 200")
        client = stack.enter_context(socket.create_connection(("127.0.0.1", port), timeout=10))
        for turn in range(3):  # one connection, kept alive
            started = time.monotonic()
            client.sendall(request(f"turn {turn}"))
            data, tail = read_response(client)
            head = data.split(b"\r\n\r\n", 1)[0].lower()
            assert head.startswith(b"http/1.1 200") and b"transfer-encoding: chunked" in head
            assert b"connection: close" not in head
            assert data.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n")  # nothing after the last event but the end
            assert tail < 1 and time.monotonic() - started < 1, (turn, tail)
        engines[0].release.set()
        for other in others:  # the held streams end too, on their own connections
            other.settimeout(10)
            assert read_response(other)[0].endswith(b"\r\n0\r\n\r\n")
