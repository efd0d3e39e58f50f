"""OpenAI Responses, the way out: core events become output items, the named SSE events that
describe each step, and the response object around them.

The non-stream render runs the same `Output` builder and drops its events, so a streamed
and a non-stream response agree on every id, index and status.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from asgi_llm.core import (
    Finish,
    GenerationEvent,
    InvalidRequest,
    LLMError,
    RateLimited,
    ReasoningDelta,
    TextDelta,
    TokenLogprob,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    Usage,
)

from ...base import Meta, stream_json
from ...logprobs import token_logprobs
from .input import Item
from .sealed import seal

__all__ = ["Output", "ResponsesStream", "finished", "frames", "response_id", "response_object", "usage_dict"]

Event = dict[str, Any]
"""One stream event's payload, before its `sequence_number`."""

ItemStatus = Literal["completed", "incomplete"]


def response_id(meta: Meta) -> str:
    return f"resp_{meta.request_id}"


class Output:
    """Output items built from core events; each step returns the stream events it makes.

    A message or reasoning item stays open while its kind of text keeps coming; tool calls
    open and close on their own events; `Finish` closes whatever is still open.
    """

    def __init__(self, request_id: str, *, sealed: bool = False) -> None:
        self.items: list[Item] = []
        self._sealed = sealed  # reasoning items carry `encrypted_content` (sealed.py)
        self.finish: Finish | None = None
        self._rid = request_id
        self._text: int | None = None  # output index of the open message or reasoning item
        self._calls: dict[int, int] = {}  # open tool calls: call_index → output index

    def feed(self, event: GenerationEvent) -> list[Event]:
        if isinstance(event, TextDelta):
            return self._delta("message", event.text, event.logprobs)
        if isinstance(event, ReasoningDelta):
            return self._delta("reasoning", event.text, ())
        if isinstance(event, ToolCallStart):
            return self._start_call(event)
        if isinstance(event, ToolCallDelta):
            return self._call_delta(event)
        if isinstance(event, ToolCallEnd):
            return self._end_call(event.call_index, "completed")
        self.finish = event
        return self.close("incomplete" if event.reason == "length" else "completed")

    def close(self, status: ItemStatus) -> list[Event]:
        """Ends every open item with `status`."""
        events = self._end_text(status)
        for call_index in list(self._calls):
            events += self._end_call(call_index, status)
        return events

    def _delta(self, kind: str, text: str, logprobs: tuple[TokenLogprob, ...]) -> list[Event]:
        events: list[Event] = []
        if self._text is None or self.items[self._text]["type"] != kind:
            events += self._end_text("completed")
            events += self._open_text(kind)
        assert self._text is not None
        index, item = self._text, self.items[self._text]
        part = item["content"][0]
        part["text"] += text
        where = {"item_id": item["id"], "output_index": index, "content_index": 0}
        if kind == "reasoning":
            return [*events, {"type": "response.reasoning_text.delta", **where, "delta": text}]
        tokens = token_logprobs(logprobs)
        part["logprobs"].extend(tokens)
        return [*events, {"type": "response.output_text.delta", **where, "delta": text, "logprobs": tokens}]

    def _open_text(self, kind: str) -> list[Event]:
        index = len(self.items)
        item: Item
        if kind == "message":
            item = {"id": f"msg_{self._rid}_{index}", "type": "message", "status": "in_progress", "role": "assistant"}
            part: Item = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        else:
            item = {"id": f"rs_{self._rid}_{index}", "type": "reasoning", "status": "in_progress", "summary": []}
            part = {"type": "reasoning_text", "text": ""}
        item["content"] = []
        self.items.append(item)
        self._text = index
        where = {"item_id": item["id"], "output_index": index, "content_index": 0}
        events = [
            _item_event("response.output_item.added", index, item),
            {"type": "response.content_part.added", **where, "part": copy.deepcopy(part)},
        ]
        item["content"].append(part)
        return events

    def _end_text(self, status: ItemStatus) -> list[Event]:
        if self._text is None:
            return []
        index, self._text = self._text, None
        item = self.items[index]
        item["status"] = status
        part = item["content"][0]
        where = {"item_id": item["id"], "output_index": index, "content_index": 0}
        if item["type"] == "message":
            done = {"type": "response.output_text.done", **where, "text": part["text"], "logprobs": part["logprobs"]}
        else:
            done = {"type": "response.reasoning_text.done", **where, "text": part["text"]}
            if self._sealed:
                item["encrypted_content"] = seal(part["text"])
        part_done = {"type": "response.content_part.done", **where, "part": part}
        return [done, part_done, _item_event("response.output_item.done", index, item)]

    def _start_call(self, event: ToolCallStart) -> list[Event]:
        events = self._end_text("completed")
        index = len(self.items)
        item = {
            "id": f"fc_{self._rid}_{index}",
            "type": "function_call",
            "status": "in_progress",
            "arguments": "",
            "call_id": event.id,
            "name": event.name,
        }
        self.items.append(item)
        self._calls[event.call_index] = index
        return [*events, _item_event("response.output_item.added", index, item)]

    def _call_delta(self, event: ToolCallDelta) -> list[Event]:
        index = self._calls[event.call_index]
        item = self.items[index]
        item["arguments"] += event.arguments
        delta = {"item_id": item["id"], "output_index": index, "delta": event.arguments}
        return [{"type": "response.function_call_arguments.delta", **delta}]

    def _end_call(self, call_index: int, status: ItemStatus) -> list[Event]:
        index = self._calls.pop(call_index)
        item = self.items[index]
        item["status"] = status
        where = {"item_id": item["id"], "output_index": index}
        done = {
            "type": "response.function_call_arguments.done",
            **where,
            "name": item["name"],
            "arguments": item["arguments"],
        }
        return [done, _item_event("response.output_item.done", index, item)]


def _item_event(kind: str, index: int, item: Item) -> Event:
    return {"type": kind, "output_index": index, "item": copy.deepcopy(item)}


def usage_dict(usage: Usage) -> dict[str, Any]:
    return {
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": {"cached_tokens": usage.cached_tokens, "cache_write_tokens": 0},
        "output_tokens": usage.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
        "total_tokens": usage.total_tokens,
    }


def response_object(
    meta: Meta,
    echo: Mapping[str, Any],
    status: str,
    output: list[Item],
    *,
    usage: Usage | None = None,
    error: LLMError | None = None,
) -> dict[str, Any]:
    """The `Response` object: ids and results, then the request's own settings (`echo`) as given."""
    body: dict[str, Any] = {
        "id": response_id(meta),
        "object": "response",
        "created_at": meta.created,
        "status": status,
        "background": False,
        "error": None if error is None else {"code": _error_code(error), "message": error.message},
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "model": meta.model,
        "output": output,
        **echo,
    }
    if usage is not None:
        body["usage"] = usage_dict(usage)
    return body


def finished(meta: Meta, echo: Mapping[str, Any], out: Output) -> dict[str, Any]:
    """The response once every event is in: `incomplete` when the output hit its token limit."""
    out.close("completed")
    finish = out.finish
    status = "incomplete" if finish is not None and finish.reason == "length" else "completed"
    return response_object(meta, echo, status, out.items, usage=finish.usage if finish else Usage(0, 0))


def _error_code(error: LLMError) -> str:
    """The nearest of the few codes the spec allows a failed response."""
    if isinstance(error, RateLimited):
        return "rate_limit_exceeded"
    if isinstance(error, InvalidRequest):
        return "invalid_prompt"
    return "server_error"


def frames(payloads: Sequence[Event]) -> bytes:
    """Stream events (with their sequence numbers) as SSE frames named by their type."""
    chunks = []
    for payload in payloads:
        data = stream_json(payload)
        chunks.append(f"event: {payload['type']}\ndata: {data}\n\n".encode())
    return b"".join(chunks)


class ResponsesStream:
    """Named SSE events (`event: <type>`), numbered from 0; no `[DONE]`.

    `final()` is the response the stream ended with (completed, incomplete or failed), for `record`.
    """

    media_type = "text/event-stream"

    def __init__(self, echo: Mapping[str, Any], meta: Meta, *, keep: bool = False, sealed: bool = False) -> None:
        self._echo = echo
        self._meta = meta
        self._out = Output(meta.request_id, sealed=sealed)
        self._sequence = 0
        self._final: dict[str, Any] | None = None
        self._kept: list[Event] | None = [] if keep else None
        self._queued = False

    def _encode(self, events: list[Event]) -> bytes:
        payloads = []
        for event in events:
            payloads.append({**event, "sequence_number": self._sequence})
            self._sequence += 1
        if self._kept is not None:
            self._kept.extend(payloads)
        return frames(payloads)

    def open(self) -> bytes:
        started = response_object(self._meta, self._echo, "in_progress", [])
        created = [] if self._queued else [{"type": "response.created", "response": started}]
        return self._encode([*created, {"type": "response.in_progress", "response": started}])

    def queue(self) -> dict[str, Any]:
        """A background response's opening: created and queued, before its model is free."""
        self._queued = True
        queued = response_object(self._meta, self._echo, "queued", [])
        self._encode(
            [{"type": "response.created", "response": queued}, {"type": "response.queued", "response": queued}]
        )
        return queued

    def snapshot(self, status: str, error: LLMError | None = None) -> dict[str, Any]:
        """The response at `status` with its output so far; `cancelled` and `failed` close it."""
        if status not in ("cancelled", "failed"):
            return response_object(self._meta, self._echo, status, copy.deepcopy(self._out.items))
        self._out.close("incomplete")
        self._final = response_object(self._meta, self._echo, status, self._out.items, error=error)
        return self._final

    def kept(self) -> list[dict[str, Any]]:
        taken, self._kept = self._kept or [], [] if self._kept is not None else None
        return taken

    def event(self, event: GenerationEvent) -> bytes:
        return self._encode(self._out.feed(event))

    def close(self) -> bytes:
        events = self._out.close("completed")
        self._final = finished(self._meta, self._echo, self._out)
        kind = "response.incomplete" if self._final["status"] == "incomplete" else "response.completed"
        return self._encode([*events, {"type": kind, "response": self._final}])

    def error(self, error: LLMError) -> bytes:
        self._out.close("incomplete")
        self._final = response_object(self._meta, self._echo, "failed", self._out.items, error=error)
        return self._encode([{"type": "response.failed", "response": self._final}])

    def final(self) -> dict[str, Any] | None:
        return self._final
