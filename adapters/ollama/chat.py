"""Ollama chat: `POST /api/chat`, streamed as NDJSON unless `"stream": false`."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import Field

from asgi_llm.core import ChatRequest, GenerationEvent, Message, ToolCall, ToolSpec, Unsupported

from ..base import GenerateRoute, Meta, Parsed, refuse_unrecognized, validate
from ..images import checked_text
from ..json_output import tool_parameters
from .common import (
    Clock,
    GenerateFields,
    Started,
    Wire,
    context_need,
    keep_alive_seconds,
    model_name,
    sampling,
    think_reasoning,
    with_images,
)
from .stream import Delta, NdjsonStream, render_reply

__all__ = ["ROUTE", "ChatStream", "fields", "parse", "render"]


class WireFunctionCall(Wire):
    name: str
    arguments: dict[str, Any]
    index: int | None = None  # inert: Ollama (0.12.10 on) numbers its calls; a call's place is its place in the list


class WireToolCall(Wire):
    """A call, as Ollama (0.12.10 on) and Open WebUI send one back: `id` honoured as the call's id
    (a tool message's `tool_call_id` names it); `index` and `type` inert, as `function.index` is."""

    function: WireFunctionCall
    id: Annotated[str, Field(min_length=1)] | None = None
    index: int | None = None
    type: Literal["function"] | None = None


class WireMessage(Wire):
    role: Literal["system", "user", "assistant", "tool"]
    content: str | None = None
    thinking: str | None = None
    images: list[str] | None = None
    tool_calls: list[WireToolCall] | None = None
    tool_name: str | None = None
    tool_call_id: str | None = None


class WireFunction(Wire):
    name: Annotated[str, Field(min_length=1)]
    description: str | None = None
    parameters: dict[str, Any] | None = None


class WireTool(Wire):
    type: Literal["function"] = "function"
    function: WireFunction


class ChatBody(GenerateFields):
    messages: list[WireMessage] | None = None
    tools: list[WireTool] | None = None


def parse(body: Any, clock: Clock = time.perf_counter_ns) -> Parsed[ChatRequest, Started]:
    started = Started.now(clock)
    wire = validate(ChatBody, body)
    refuse_unrecognized(wire)
    request = ChatRequest(
        model=model_name(wire.model),
        messages=_messages(wire.messages or []),
        sampling=sampling(wire.options, logprobs=wire.logprobs, top_logprobs=wire.top_logprobs, fmt=wire.format),
        tools=tuple(
            ToolSpec(f.name, f.description, tool_parameters(f.parameters, f"tools[{i}].function.parameters"))
            for i, f in enumerate(t.function for t in wire.tools or ())
        ),
        reasoning=think_reasoning(wire.think),
    )
    # No messages is Ollama's "load the model" call (with `keep_alive: 0`, "unload" it).
    keep_alive = keep_alive_seconds(wire.keep_alive)
    need = context_need(wire.options)
    return Parsed(
        request, started, stream=wire.stream, keep_alive=keep_alive, load_only=not wire.messages, needs_context=need
    )


def _messages(wire: Sequence[WireMessage]) -> tuple[Message, ...]:
    """A call without an id (Ollama's before 0.12.10) is given one; a tool result names the call it
    answers (`tool_call_id`), or is linked to the earliest unanswered call to its tool."""
    unanswered: list[ToolCall] = []
    out = []
    for i, m in enumerate(wire):
        _refuse_misplaced(m, f"messages[{i}]")
        content, images = with_images(
            checked_text(m.content or "", f"messages[{i}].content"), m.images, f"messages[{i}]"
        )
        if images and m.role != "user":
            raise Unsupported("Images belong in a user's message.", param=f"messages[{i}].images")
        calls = tuple(
            ToolCall(c.id or f"call_{i}_{j}", c.function.name, json.dumps(c.function.arguments, ensure_ascii=False))
            for j, c in enumerate(m.tool_calls or ())
        )
        if m.role == "assistant":
            unanswered = list(calls)
        is_tool = m.role == "tool"
        out.append(
            Message(
                role=m.role,
                content=content,
                name=m.tool_name if is_tool else None,
                tool_calls=calls,
                tool_call_id=(m.tool_call_id or _answer(unanswered, m.tool_name)) if is_tool else None,
                reasoning=m.thinking or None,
                images=images,
            )
        )
    return tuple(out)


def _refuse_misplaced(m: WireMessage, where: str) -> None:
    """A field on a role nothing reads it on (thinking on a user's turn, a tool's name on an
    assistant's...) is refused, naming it, never dropped."""
    owners = (
        ("thinking", m.thinking, "assistant"),
        ("tool_calls", m.tool_calls, "assistant"),
        ("tool_name", m.tool_name, "tool"),
        ("tool_call_id", m.tool_call_id, "tool"),
    )
    for field, value, role in owners:
        if value and m.role != role:
            param = f"{where}.{field}"
            raise Unsupported(f"'{param}' belongs in a message of role '{role}', not '{m.role}'.", param=param)


def _answer(unanswered: list[ToolCall], name: str | None) -> str | None:
    """The id of the earliest unanswered call to `name` (to any, if the result names none)."""
    for k, call in enumerate(unanswered):
        if name is None or call.name == name:
            return unanswered.pop(k).id
    return None


def fields(delta: Delta) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": delta.content}
    if delta.thinking:
        message["thinking"] = delta.thinking
    if delta.tool_calls:
        message["tool_calls"] = list(delta.tool_calls)
    return {"message": message}


def render(
    parsed: Parsed[ChatRequest, Started],
    meta: Meta,
    events: Sequence[GenerationEvent],
    now_ns: Clock = time.perf_counter_ns,
) -> dict[str, Any]:
    return render_reply(parsed, meta, events, fields, now_ns)


class ChatStream(NdjsonStream):
    def fields(self, delta: Delta) -> dict[str, Any]:
        return fields(delta)


ROUTE = GenerateRoute(path="/api/chat", parse=parse, render=render, encoder=ChatStream, body=ChatBody)
