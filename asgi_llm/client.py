"""`LLMApp.client()`: the app's models for the host's own code, in this process, without HTTP.

A request from here takes the same path as one over HTTP — the OpenAI route's parsing (so a
field is honoured or refused exactly as there), the usage, limits and allow-list layers, the
pool's queue — but under an identity the host names, and the endpoint hands back core events
instead of encoding them. So host routes share the models' slots, limits and usage records
with every other client, and stream token by token with nothing in between.
"""

from __future__ import annotations

import json
import types
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Self

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from .core import (
    EmbeddingResult,
    Finish,
    GenerationEvent,
    InternalError,
    PromptRead,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    ToolCallStart,
    Usage,
    total_usage,
)
from .core.policy import KeyInfo
from .http.asgi import Message
from .http.context import InProcessCall, RequestContext, new_request_id

__all__ = ["ChatResult", "ChatStream", "Client", "Completion", "Embeddings", "ToolCall"]

Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Serve = Callable[[str, RequestContext, Receive, Send], Awaitable[None]]
"""Runs one request for `path` (an OpenAI route below the mount) in the given context."""

_BUFFER = 64
"""Events held for a slow reader before the generation waits for it."""


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str
    """The arguments as JSON text, as the model wrote them (grammar-held where forced)."""

    def parsed_arguments(self) -> Any:
        return json.loads(self.arguments)


@dataclass(frozen=True)
class ChatResult:
    """One chat reply, whole: what `Client.chat` returns and `ChatStream.result()` gives."""

    model: str
    request_id: str
    text: str
    reasoning: str
    tool_calls: tuple[ToolCall, ...]
    finish_reason: str
    usage: Usage


@dataclass(frozen=True)
class Completion:
    model: str
    request_id: str
    text: str
    finish_reason: str
    usage: Usage


@dataclass(frozen=True)
class Embeddings:
    model: str
    request_id: str
    vectors: tuple[tuple[float, ...], ...]
    usage: Usage


@dataclass
class _Reply:
    """What a stream has said so far, gathered as it goes."""

    text: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    calls: dict[int, list[str]] = field(default_factory=dict)  # call index -> [id, name, arguments...]
    finishes: list[Finish] = field(default_factory=list)

    def add(self, event: GenerationEvent) -> None:
        if isinstance(event, TextDelta):
            self.text.append(event.text)
        elif isinstance(event, ReasoningDelta):
            self.reasoning.append(event.text)
        elif isinstance(event, ToolCallStart):
            self.calls[event.call_index] = [event.id, event.name]
        elif isinstance(event, ToolCallDelta):
            self.calls[event.call_index].append(event.arguments)
        elif isinstance(event, Finish):
            self.finishes.append(event)


class _Request:
    """One request run through the app as a task beside the caller; what it delivers arrives
    on a bounded channel, so a slow reader holds the generation back instead of piling up."""

    def __init__(self, serve: Serve, path: str, context: RequestContext) -> None:
        self._serve, self._path, self._context = serve, path, context
        self._left = anyio.Event()
        self._items: MemoryObjectReceiveStream[Any] | None = None
        self._group: anyio.abc.TaskGroup | None = None
        self._call: InProcessCall | None = None
        self._status: int | None = None

    @property
    def request_id(self) -> str:
        return self._context.request_id

    @property
    def model(self) -> str:
        """The id of the model serving the request, once it has one."""
        return (self._call.model if self._call is not None else None) or ""

    async def __aenter__(self) -> Any:
        sender, self._items = anyio.create_memory_object_stream[Any](_BUFFER)
        self._call = self._context.in_process = InProcessCall(deliver=sender.send)
        self._group = anyio.create_task_group()
        await self._group.__aenter__()
        self._group.start_soon(self._run, sender)
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: types.TracebackType | None
    ) -> bool | None:
        self._left.set()  # a request still running sees its client leave, and stops
        assert self._group is not None and self._items is not None
        try:
            return await self._group.__aexit__(kind, error, trace)
        except BaseExceptionGroup as group:  # the caller's own error, wrapped by the task group
            if error is not None and len(group.exceptions) == 1 and group.exceptions[0] is error:
                raise error from None
            raise
        finally:
            self._items.close()

    async def _run(self, sender: MemoryObjectSendStream[Any]) -> None:
        async with sender:
            await self._serve(self._path, self._context, self._receive, self._send)

    async def _receive(self) -> Message:
        await self._left.wait()
        return {"type": "http.disconnect"}

    async def _send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self._status = int(message["status"])

    async def _delivered(self) -> AsyncIterator[Any]:
        assert self._items is not None
        async for item in self._items:
            yield item
        assert self._call is not None
        if self._call.error is not None:
            raise self._call.error
        if self._status != 200:
            raise InternalError("The server had an error while processing your request.")


class ChatStream(_Request):
    """`async with client.stream_chat(...) as stream: async for event in stream: ...`

    Yields the core events (`TextDelta`, `ReasoningDelta`, `ToolCallStart`, `ToolCallDelta`,
    `ToolCallEnd`, `Finish`) as the model makes them. Leaving the block early — a `break`, an
    exception, the host's task cancelled — stops the generation at its next token and frees
    its slot, as a client that disconnects does. Errors raise the core error types
    (`asgi_llm.core`: `InvalidRequest`, `ModelNotFound`, `RateLimited`, ...).
    """

    def __init__(self, serve: Serve, path: str, context: RequestContext) -> None:
        super().__init__(serve, path, context)
        self._reply = _Reply()

    async def __aenter__(self) -> Self:
        await super().__aenter__()
        return self

    def __aiter__(self) -> AsyncIterator[GenerationEvent]:
        return self._events()

    async def _events(self) -> AsyncIterator[GenerationEvent]:
        async for event in self._delivered():
            if not isinstance(event, PromptRead):
                self._reply.add(event)
                yield event

    def result(self) -> ChatResult:
        """The reply as it stands: whole once the stream is read to its end."""
        reply = self._reply
        calls = tuple(ToolCall(parts[0], parts[1], "".join(parts[2:])) for _, parts in sorted(reply.calls.items()))
        return ChatResult(
            model=self.model,
            request_id=self.request_id,
            text="".join(reply.text),
            reasoning="".join(reply.reasoning),
            tool_calls=calls,
            finish_reason=reply.finishes[-1].reason if reply.finishes else "length",
            usage=total_usage(reply.finishes),
        )


class Client:
    """The app's models for host code; made by `LLMApp.client(key=...)`.

    Keyword arguments beyond the named ones are OpenAI Chat Completions (or Completions,
    Embeddings) fields — `max_tokens`, `temperature`, `stop`, `tools`, `tool_choice`,
    `response_format`, `reasoning_effort`, ... — honoured or refused (`InvalidRequest` naming
    the field) exactly as over HTTP. Streaming is this client's own choice: no `stream` field.
    """

    def __init__(self, serve: Serve, identity: KeyInfo | None) -> None:
        self._serve, self._identity = serve, identity

    @property
    def key(self) -> str | None:
        """The name usage records, metrics and limits count this client's requests under."""
        return None if self._identity is None else self._identity.name

    def stream_chat(self, messages: Sequence[Mapping[str, Any]], *, model: str, **fields: Any) -> ChatStream:
        body = _body(fields, model=model, messages=[dict(m) for m in messages])
        return ChatStream(self._serve, "/chat/completions", self._context(body))

    async def chat(self, messages: Sequence[Mapping[str, Any]], *, model: str, **fields: Any) -> ChatResult:
        async with self.stream_chat(messages, model=model, **fields) as stream:
            async for _ in stream:
                pass
        return stream.result()

    async def complete(self, prompt: str, *, model: str, **fields: Any) -> Completion:
        stream = ChatStream(self._serve, "/completions", self._context(_body(fields, model=model, prompt=prompt)))
        async with stream:
            async for _ in stream:
                pass
        whole = stream.result()
        return Completion(whole.model, whole.request_id, whole.text, whole.finish_reason, whole.usage)

    async def embed(self, input: str | Sequence[str], *, model: str, **fields: Any) -> Embeddings:
        texts = input if isinstance(input, str) else list(input)
        request = _Request(self._serve, "/embeddings", self._context(_body(fields, model=model, input=texts)))
        async with request:
            found: list[EmbeddingResult] = [item async for item in request._delivered()]
        result = found[0]
        vectors = tuple(e.vector for e in result.embeddings)
        return Embeddings(request.model, request.request_id, vectors, Usage(result.prompt_tokens, 0))

    def _context(self, body: dict[str, Any]) -> RequestContext:
        return RequestContext(new_request_id(), key=self._identity, body=body)


def _body(fields: Mapping[str, Any], **named: Any) -> dict[str, Any]:
    if "stream" in fields or "stream_options" in fields:
        raise TypeError("the client streams with stream_chat(); 'stream' is not a field here")
    clash = named.keys() & fields.keys()
    if clash:
        raise TypeError(f"{min(clash)!r} given twice")
    return {**fields, **named}
