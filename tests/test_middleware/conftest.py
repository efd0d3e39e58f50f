"""A raw ASGI driver (httpx's ASGITransport buffers whole responses) and scripted-engine apps,
handed to the tests as the `kit` fixture (test folders are not packages, so nothing is imported).

`drive(app, "POST", "/chat/completions", json=...)` calls the app with our own `receive` and
`send`: the body arrives (in chunks if asked), then `receive` waits until the response is
complete — or until `leave_after` body chunks were sent, when the client "disconnects".
"""

from __future__ import annotations

import asyncio
import contextlib
import json as jsonlib
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from asgi_llm import LLMApp, ModelConfig, ModelPool, Settings
from asgi_llm.adapters.anthropic import ANTHROPIC
from asgi_llm.adapters.ollama import OLLAMA
from asgi_llm.adapters.openai import OPENAI
from asgi_llm.core import Finish, GenerationEvent, GenerationRequest, TextDelta, Usage
from asgi_llm.engines.fake import FakeEngine

CHAT = {"model": "fake", "messages": [{"role": "user", "content": "hi"}]}
MESSAGES = {"model": "fake", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}
OLLAMA_CHAT = {"model": "fake", "messages": [{"role": "user", "content": "hi"}], "stream": False}
ALL = (OPENAI, ANTHROPIC, OLLAMA)


@dataclass
class Reply:
    status: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    chunks: list[bytes] = field(default_factory=list)
    complete: bool = False

    @property
    def body(self) -> bytes:
        return b"".join(self.chunks)

    def json(self) -> Any:
        return jsonlib.loads(self.body)


async def drive(
    app: Any,
    method: str,
    path: str,
    *,
    json: Any = None,
    body: bytes | None = None,
    headers: Sequence[tuple[str, str]] = (),
    chunk_size: int | None = None,
    leave_after: int | None = None,
    leave_before_body: bool = False,
    root_path: str = "",
    on_chunk: Callable[[bytes], None] | None = None,
) -> Reply:
    payload = jsonlib.dumps(json).encode() if json is not None else (body or b"")
    parts = [payload[i : i + chunk_size] for i in range(0, len(payload), chunk_size)] if chunk_size else [payload]
    incoming: list[dict[str, Any]] = [
        {"type": "http.request", "body": part, "more_body": i < len(parts) - 1} for i, part in enumerate(parts)
    ]
    if leave_before_body:
        incoming = []
    reply = Reply()
    gone = asyncio.Event()
    if leave_before_body:
        gone.set()

    async def receive() -> dict[str, Any]:
        if incoming:
            return incoming.pop(0)
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if gone.is_set() and not reply.complete and leave_after is not None:
            raise OSError("client gone")
        if message["type"] == "http.response.start":
            reply.status = message["status"]
            reply.headers = {bytes(k).decode().lower(): bytes(v).decode() for k, v in message.get("headers", [])}
        elif message["type"] == "http.response.body":
            reply.chunks.append(message.get("body", b""))
            if on_chunk is not None:
                on_chunk(message.get("body", b""))
            if not message.get("more_body", False):
                reply.complete = True
                gone.set()
            elif leave_after is not None and len(reply.chunks) >= leave_after:
                gone.set()

    all_headers = [(b"host", b"test"), *((k.lower().encode(), v.encode()) for k, v in headers)]
    if payload:
        all_headers.append((b"content-type", b"application/json"))
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": root_path + path,
        "raw_path": (root_path + path).encode(),
        "root_path": root_path,
        "query_string": b"",
        "headers": all_headers,
        "client": ("127.0.0.1", 5000),
        "server": ("test", 80),
    }
    await app(scope, receive, send)
    return reply


class SlowEngine(FakeEngine):
    """Yields its pieces one at a time, each after `step` seconds, and counts generations."""

    step = 0.01
    generations = 0

    async def _events(self, request: GenerationRequest) -> AsyncGenerator[GenerationEvent, None]:
        type(self).generations += 1
        limit = request.sampling.max_tokens or len(self.pieces)
        pieces = self.pieces[:limit]
        for piece in pieces:
            await asyncio.sleep(self.step)
            yield TextDelta(piece)
        yield Finish(
            "length" if limit < len(self.pieces) else "stop", Usage(prompt_tokens=3, completion_tokens=len(pieces))
        )


def fake_settings(**options: Any) -> Settings:
    models = (
        ModelConfig(id="fake", path="unused.gguf", aliases=("default",), embeddings=True),
        ModelConfig(id="other", path="unused.gguf"),
    )
    return Settings(models=models, **options)


def fake_pool(
    settings: Settings | None = None, engine: type[FakeEngine] = FakeEngine, **engine_options: Any
) -> ModelPool:
    return ModelPool(
        settings or fake_settings(), engine_factory=lambda config, thread: engine(config, thread, **engine_options)
    )


@contextlib.asynccontextmanager
async def running(*apps: LLMApp) -> AsyncIterator[None]:
    async with contextlib.AsyncExitStack() as stack:
        for app in apps:
            await stack.enter_async_context(app.lifespan())
        for app in apps:
            await app.pool.wait_ready()
        yield


class Kit:
    CHAT = CHAT
    MESSAGES = MESSAGES
    OLLAMA_CHAT = OLLAMA_CHAT
    ALL = ALL
    OLLAMA = OLLAMA
    Reply = Reply
    SlowEngine = SlowEngine
    drive = staticmethod(drive)
    fake_settings = staticmethod(fake_settings)
    fake_pool = staticmethod(fake_pool)
    running = staticmethod(running)


@pytest.fixture
def kit() -> type[Kit]:
    SlowEngine.generations = 0
    return Kit
