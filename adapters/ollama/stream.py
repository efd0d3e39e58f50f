"""Ollama's generation replies: whole tool calls, NDJSON lines, and the closing `done` object.

Chat and generate differ only in where the text goes (`message` or `response`); each
supplies that as a `Fields` function and shares the rest from here.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from asgi_llm.core import (
    Finish,
    GenerationEvent,
    InternalError,
    LLMError,
    ReasoningDelta,
    TextDelta,
    TokenLogprob,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
)

from ..base import Meta, Parsed, Unrecorded
from ..logprobs import token_logprobs
from .common import NDJSON, Clock, Durations, Started, done_reason, durations_since, ndjson, rfc3339

__all__ = ["Delta", "Fields", "NdjsonStream", "Turn", "render_reply"]


@dataclass(frozen=True)
class Delta:
    """What one line (or, whole, the reply) adds: text, thinking, finished tool calls, logprobs."""

    content: str = ""
    thinking: str = ""
    tool_calls: tuple[dict[str, Any], ...] = ()
    logprobs: tuple[TokenLogprob, ...] = ()


Fields = Callable[[Delta], dict[str, Any]]


def _tool_call(name: str, arguments: str) -> dict[str, Any]:
    """Ollama sends a call whole, its arguments as an object rather than JSON text."""
    try:
        parsed = json.loads(arguments or "{}")
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict):
        raise InternalError(f"The model called '{name}' with arguments that are not a JSON object.")
    return {"function": {"name": name, "arguments": parsed}}


class Turn:
    """Folds a reply's events into Ollama's view; tool-call fragments wait for their call's end."""

    def __init__(self) -> None:
        self.finish: Finish | None = None
        self._parts: list[Delta] = []
        self._calls: dict[int, tuple[str, list[str]]] = {}

    def feed(self, event: GenerationEvent) -> Delta | None:
        delta: Delta | None = None
        if isinstance(event, TextDelta):
            delta = Delta(content=event.text, logprobs=event.logprobs)
        elif isinstance(event, ReasoningDelta):
            delta = Delta(thinking=event.text)
        elif isinstance(event, ToolCallStart):
            self._calls[event.call_index] = (event.name, [])
        elif isinstance(event, ToolCallDelta):
            self._calls[event.call_index][1].append(event.arguments)
        elif isinstance(event, ToolCallEnd):
            name, fragments = self._calls.pop(event.call_index)
            delta = Delta(tool_calls=(_tool_call(name, "".join(fragments)),))
        else:
            self.finish = event
        if delta is not None:
            self._parts.append(delta)
        return delta

    def whole(self) -> Delta:
        parts = self._parts
        return Delta(
            content="".join(p.content for p in parts),
            thinking="".join(p.thinking for p in parts),
            tool_calls=tuple(call for p in parts for call in p.tool_calls),
            logprobs=tuple(lp for p in parts for lp in p.logprobs),
        )


def _head(meta: Meta) -> dict[str, Any]:
    return {"model": meta.model, "created_at": rfc3339(meta.created)}


def _done(finish: Finish | None, durations: Durations) -> dict[str, Any]:
    usage = finish.usage if finish is not None else None
    return {
        "done": True,
        "done_reason": done_reason(finish.reason if finish is not None else None),
        "total_duration": durations["total_duration"],
        "load_duration": durations["load_duration"],
        "prompt_eval_count": usage.prompt_tokens - usage.cached_tokens if usage else 0,  # Ollama's: evaluated
        "prompt_eval_duration": durations["prompt_eval_duration"],
        "eval_count": usage.completion_tokens if usage else 0,
        "eval_duration": durations["eval_duration"],
    }


def _loaded(parsed: Parsed[Any, Started], meta: Meta, fields: Fields) -> dict[str, Any]:
    """Ollama's answer to "load the model" (an empty prompt), or with `keep_alive: 0`, "unload" it."""
    reason = "unload" if parsed.keep_alive == 0 else "load"
    return {**_head(meta), **fields(Delta()), "done": True, "done_reason": reason}


def render_reply(
    parsed: Parsed[Any, Started], meta: Meta, events: Sequence[GenerationEvent], fields: Fields, now_ns: Clock
) -> dict[str, Any]:
    """The `stream: false` reply (and any load call's): the whole message and the `done` fields."""
    if parsed.load_only:
        return _loaded(parsed, meta, fields)
    turn = Turn()
    for event in events:
        turn.feed(event)
    whole = turn.whole()
    body = {**_head(meta), **fields(whole)}
    if parsed.request.sampling.logprobs:
        body["logprobs"] = token_logprobs(whole.logprobs)
    return {**body, **_done(turn.finish, durations_since(parsed.options, now_ns(), *(meta.decoded or (None, None))))}


class NdjsonStream(Unrecorded):
    """One JSON object a line; the last says `done` and carries counts and nanosecond timings.

    Timings come from `clock` (nanoseconds, the clock `Started` was read on): total from the
    request's start to `close`, prompt evaluation until the first event, evaluation from the
    first event to the last. (The stream opens only once the first token is made, so its own
    construction is no start.)
    """

    media_type = NDJSON

    def __init__(self, parsed: Parsed[Any, Started], meta: Meta, clock: Clock = time.perf_counter_ns) -> None:
        self._meta = meta
        self._clock = clock
        self._started = parsed.options
        self._first: int | None = None
        self._last: int | None = None
        self._logprobs = parsed.request.sampling.logprobs
        self._turn = Turn()

    def fields(self, delta: Delta) -> dict[str, Any]:
        raise NotImplementedError

    def open(self) -> bytes:
        return b""

    def event(self, event: GenerationEvent) -> bytes:
        self._last = self._clock()
        if self._first is None:
            self._first = self._last
        delta = self._turn.feed(event)
        if delta is None:
            return b""
        line = {**_head(self._meta), **self.fields(delta)}
        if self._logprobs and delta.logprobs:
            line["logprobs"] = token_logprobs(delta.logprobs)
        return ndjson({**line, "done": False})

    def close(self) -> bytes:
        durations = durations_since(self._started, self._clock(), self._first, self._last)
        return ndjson({**_head(self._meta), **self.fields(Delta()), **_done(self._turn.finish, durations)})

    def error(self, error: LLMError) -> bytes:
        return ndjson({"error": error.message, **({"request_id": self._meta.trace} if self._meta.trace else {})})
