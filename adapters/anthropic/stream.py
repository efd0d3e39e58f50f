"""Anthropic Messages, the way out: core events become content-block events.

One block state machine (`_Blocks`) turns core events into block events; `MessageStream`
sends them as named SSE events and `fold_message` folds them into the non-stream reply,
as the SDKs do, so both shapes always agree.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

from asgi_llm.core import (
    ChatRequest,
    Finish,
    GenerationEvent,
    InternalError,
    LLMError,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    ToolCallStart,
    Usage,
)

from ..base import Meta, Parsed, Unrecorded
from .common import render_error, sse, tag_error, tool_use_id

__all__ = ["AutoCache", "MessageStream", "fold_message"]

THINKING_SIGNATURE = "asgi-llm-unsigned"
"""Anthropic signs thinking blocks; we have nothing to sign with, and ignore signatures sent back."""


@dataclass(frozen=True)
class AutoCache:
    """A request's top-level `cache_control` (automatic prompt caching: `{"type": "ephemeral"}`,
    with a `ttl` of `5m` or `1h`). Nothing to switch on: every prompt stays in the prompt cache
    here, for as long as room allows, whatever the ttl. What it changes is the usage: the
    prompt's tokens the cache did not hold count as written to it."""


class WireUsage(TypedDict):
    input_tokens: int
    output_tokens: int
    cache_creation_input_tokens: int
    cache_read_input_tokens: int


class StopInfo(TypedDict):
    stop_reason: str | None
    stop_sequence: str | None


_STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}
_EMPTY_BLOCKS: dict[str, dict[str, Any]] = {
    "text": {"type": "text", "text": ""},
    "thinking": {"type": "thinking", "thinking": "", "signature": ""},
}
_DELTA_FIELDS = {"text_delta": "text", "thinking_delta": "thinking", "signature_delta": "signature"}


def _usage(usage: Usage, cache: AutoCache | None) -> WireUsage:
    """Anthropic counts cache reads and writes apart: the three input counts sum to the prompt's
    tokens. Reads are the engine's cached tokens; with `cache_control` (`AutoCache`) the rest
    were written to the cache, as Anthropic counts a prompt cached up to its last block."""
    uncached = usage.prompt_tokens - usage.cached_tokens
    written = uncached if cache is not None else 0
    return {
        "input_tokens": uncached - written,
        "output_tokens": usage.completion_tokens,
        "cache_creation_input_tokens": written,
        "cache_read_input_tokens": usage.cached_tokens,
    }


def _stop(finish: Finish | None) -> StopInfo:
    if finish is None:
        return {"stop_reason": "end_turn", "stop_sequence": None}
    if finish.reason == "stop" and finish.stop_sequence is not None:
        return {"stop_reason": "stop_sequence", "stop_sequence": finish.stop_sequence}
    return {"stop_reason": _STOP_REASONS[finish.reason], "stop_sequence": None}


def _message(
    meta: Meta, content: list[dict[str, Any]], stop: StopInfo, usage: Usage, cache: AutoCache | None
) -> dict[str, Any]:
    return {
        "id": f"msg_{meta.request_id}",
        "type": "message",
        "role": "assistant",
        "model": meta.model,
        "content": content,
        **stop,
        "usage": _usage(usage, cache),
    }


class _Blocks:
    """Core events → content-block events; requests here have one choice (n=1).

    A block opens with its first event and closes when another block starts or the
    message finishes; a thinking block gets its `signature_delta` just before it closes.
    """

    def __init__(self) -> None:
        self._index = -1
        self._open: str | None = None
        self.finish: Finish | None = None

    def feed(self, event: GenerationEvent) -> list[dict[str, Any]]:
        if isinstance(event, TextDelta):
            return self._delta("text", {"type": "text_delta", "text": event.text}) if event.text else []
        if isinstance(event, ReasoningDelta):
            return self._delta("thinking", {"type": "thinking_delta", "thinking": event.text}) if event.text else []
        if isinstance(event, ToolCallStart):
            return self.close() + self._start(
                {"type": "tool_use", "id": tool_use_id(event.id), "name": event.name, "input": {}}
            )
        if isinstance(event, ToolCallDelta):
            delta = {"type": "input_json_delta", "partial_json": event.arguments}
            return [{"type": "content_block_delta", "index": self._index, "delta": delta}] if event.arguments else []
        if isinstance(event, Finish):
            self.finish = event
        return self.close()  # ToolCallEnd, Finish

    def close(self) -> list[dict[str, Any]]:
        if self._open is None:
            return []
        ops = []
        if self._open == "thinking":
            delta = {"type": "signature_delta", "signature": THINKING_SIGNATURE}
            ops.append({"type": "content_block_delta", "index": self._index, "delta": delta})
        self._open = None
        return [*ops, {"type": "content_block_stop", "index": self._index}]

    def _delta(self, kind: str, delta: dict[str, Any]) -> list[dict[str, Any]]:
        ops = [] if self._open == kind else self.close() + self._start(dict(_EMPTY_BLOCKS[kind]))
        return [*ops, {"type": "content_block_delta", "index": self._index, "delta": delta}]

    def _start(self, block: dict[str, Any]) -> list[dict[str, Any]]:
        self._index += 1
        self._open = block["type"]
        return [{"type": "content_block_start", "index": self._index, "content_block": block}]


def _fold(ops: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The content a client assembles from the block events, as the SDKs do."""
    content: list[dict[str, Any]] = []
    partial_json: dict[int, str] = {}
    for op in ops:
        if op["type"] == "content_block_start":
            content.append(dict(op["content_block"]))
        elif op["type"] == "content_block_delta":
            index, delta = op["index"], op["delta"]
            if delta["type"] == "input_json_delta":
                partial_json[index] = partial_json.get(index, "") + delta["partial_json"]
            else:
                field = _DELTA_FIELDS[delta["type"]]
                content[index][field] += delta[field]
    for index, raw in partial_json.items():
        content[index]["input"] = _json_object(raw)
    return content


def _json_object(raw: str) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = None
    if not isinstance(value, dict):
        raise InternalError("The model produced tool arguments that are not a JSON object.")
    return value


def fold_message(meta: Meta, events: Sequence[GenerationEvent], cache: AutoCache | None = None) -> dict[str, Any]:
    """The non-stream reply: the stream's block events, assembled as a client would."""
    blocks = _Blocks()
    ops = [op for event in events for op in blocks.feed(event)] + blocks.close()
    finish = blocks.finish
    return _message(meta, _fold(ops), _stop(finish), finish.usage if finish else Usage(0, 0), cache)


class MessageStream(Unrecorded):
    """`message_start` and a `ping` first, then each block's start/delta/stop, `message_delta`, `message_stop`.

    `message_start` counts the prompt's tokens where the engine read them before the first
    token (the local engine does; an upstream tells only at the finish: zero then), as
    Anthropic's does; `message_delta` carries the cumulative counts, input ones included.
    """

    media_type = "text/event-stream"

    def __init__(self, parsed: Parsed[ChatRequest, AutoCache | None], meta: Meta) -> None:
        self._meta = meta
        self._cache = parsed.options
        self._blocks = _Blocks()

    def open(self) -> bytes:
        prompt = self._meta.prompt or Usage(0, 0)
        message = _message(self._meta, [], {"stop_reason": None, "stop_sequence": None}, prompt, self._cache)
        return sse({"type": "message_start", "message": message}) + sse({"type": "ping"})

    def event(self, event: GenerationEvent) -> bytes:
        ops = self._blocks.feed(event)
        if isinstance(event, Finish):
            usage = _usage(event.usage, self._cache)
            ops.append({"type": "message_delta", "delta": _stop(event), "usage": usage})
        return b"".join(sse(op) for op in ops)

    def close(self) -> bytes:
        return b"".join(sse(op) for op in self._blocks.close()) + sse({"type": "message_stop"})

    def error(self, error: LLMError) -> bytes:
        body = render_error(error)[1]
        return sse(tag_error(body, self._meta.trace) if self._meta.trace else body)
