"""What the endpoint tells the tracing layer about one traced request, in `RequestContext.trace`.

Made by the tracing layer only while its span records, so an untraced request pays nothing:
the endpoint asks `context.trace is None` and goes on. The notes are protocol-neutral (core
requests and events); the layer turns them into span attributes and events.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field
from typing import Any

from ..core import (
    ChatRequest,
    CompletionRequest,
    EmbeddingRequest,
    EngineEvent,
    Finish,
    PromptRead,
    Queued,
    TextDelta,
)

__all__ = ["Mark", "TraceNotes"]


@dataclass(frozen=True)
class Mark:
    """A moment in the request: a span event's name, when (`time.time_ns`), its attributes."""

    name: str
    at: int
    attributes: dict[str, Any]


@dataclass
class TraceNotes:
    content: bool = False
    """Whether the prompt and the completion may be kept (`trace_content = true`)."""
    clock: Callable[[], int] = time.time_ns
    operation: str | None = None
    model: str | None = None
    max_tokens: int | None = None
    marks: list[Mark] = field(default_factory=list)
    finish_reasons: list[str] = field(default_factory=list)
    prompt: list[dict[str, Any]] | None = None
    completion: dict[int, list[str]] = field(default_factory=dict)
    _queued: int | None = None
    _first: bool = False

    def asked(self, request: Any) -> None:
        """The parsed core request: its operation, model and token limit, and (with `content`) its prompt."""
        if isinstance(request, ChatRequest):
            self.operation = "chat"
            if self.content:
                self.prompt = [{"role": m.role, "content": m.content} for m in request.messages]
        elif isinstance(request, CompletionRequest):
            self.operation = "text_completion"
            if self.content:
                self.prompt = [{"role": "user", "content": p} for p in request.prompts if isinstance(p, str)]
        elif isinstance(request, EmbeddingRequest):
            self.operation = "embeddings"
        self.model = getattr(request, "model", None)
        sampling = getattr(request, "sampling", None)
        self.max_tokens = None if sampling is None else sampling.max_tokens

    def saw(self, event: EngineEvent) -> None:
        if isinstance(event, Queued):
            if self._queued is None:
                self._queued = self.clock()
                self.marks.append(Mark("asgi_llm.queued", self._queued, {}))
            return
        if self._queued is not None:  # the wait is over once anything else comes
            waited = self.clock() - self._queued
            self.marks.append(Mark("asgi_llm.dequeued", self.clock(), {"asgi_llm.queue.wait_seconds": waited / 1e9}))
            self._queued = None
        if isinstance(event, PromptRead):
            attributes = {"gen_ai.usage.input_tokens": event.tokens, "asgi_llm.prompt.cached_tokens": event.cached}
            self.marks.append(Mark("asgi_llm.prompt_read", self.clock(), attributes))
            return
        if not self._first:
            self._first = True
            self.marks.append(Mark("asgi_llm.first_token", self.clock(), {}))
        if isinstance(event, Finish):
            self.finish_reasons.append(event.reason)
        elif self.content and isinstance(event, TextDelta):
            self.completion.setdefault(event.index, []).append(event.text)

    async def watch(self, events: AsyncGenerator[EngineEvent, None]) -> AsyncGenerator[EngineEvent, None]:
        """`events` passed through unchanged, each one seen on its way."""
        async with contextlib.aclosing(events):
            async for event in events:
                self.saw(event)
                yield event

    def output(self) -> list[dict[str, Any]]:
        """The completion, one message per choice (with `content`)."""
        return [{"role": "assistant", "content": "".join(parts)} for _, parts in sorted(self.completion.items())]
