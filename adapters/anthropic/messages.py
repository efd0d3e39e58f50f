"""Anthropic Messages: `POST /messages` and `POST /messages/count_tokens`, the way in.

Content blocks arrive as one flat model checked per block type, so an error names a
single param (`messages[1].content[0].text`). Replies leave through `anthropic_stream`,
whose one block state machine both streams and folds the non-stream reply.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Annotated, Any, Literal

from pydantic import Field

from asgi_llm.core import (
    ChatRequest,
    GenerationEvent,
    ImageInput,
    InvalidRequest,
    Message,
    OutputFormat,
    Reasoning,
    SamplingParams,
    ToolCall,
    Unsupported,
)

from ..base import CountRoute, GenerateRoute, Meta, Parsed, Route, refuse_unrecognized, validate
from ..images import base64_image, checked_text, joined, url_image
from ..json_output import json_schema
from .common import ThreadsUnsupported, Wire, WireCacheControl
from .stream import AutoCache, MessageStream, fold_message
from .tools import WireTool, WireToolChoice, custom_tools, tool_choice

__all__ = [
    "ROUTES",
    "parse",
    "parse_count",
    "render",
    "render_count",
]


class ImageSource(Wire):
    """An `image` block's `source`: `base64` (with `media_type`) or `url`."""

    type: str
    media_type: str | None = None
    data: str | None = None
    url: str | None = None
    file_id: str | None = None  # a `file` source's: refused with its type


class Caller(Wire):
    """Who made a `tool_use` call, as Claude's replies say: `direct` (the model itself) is what every call
    here is, so it is inert; a call made by code in a code-execution tool (`tool_id`) is refused by its type."""

    type: str
    tool_id: str | None = None


class Block(Wire):
    """Any content block; `_REQUIRED` names the fields each known type must carry, `_OPTIONAL`
    the others it may (a field of another type's is refused, never dropped)."""

    type: str
    text: str | None = None
    id: str | None = None
    name: str | None = None
    input: dict[str, Any] | None = None
    tool_use_id: str | None = None
    content: list[Block] | str | None = None
    is_error: bool | None = None
    thinking: str | None = None
    signature: str | None = None  # a thinking block's, sent back: nothing here to check it with (stream.py)
    data: str | None = None  # a redacted_thinking block's: another server's sealed thinking, unreadable here
    source: ImageSource | None = None
    cache_control: WireCacheControl | None = None
    caller: Caller | None = None  # a tool_use block's: see `Caller`


class WireMessage(Wire):
    role: Literal["user", "assistant"]
    content: list[Block] | str


class WireThinking(Wire):
    type: Literal["enabled", "disabled", "adaptive"]
    budget_tokens: Annotated[int, Field(ge=1024)] | None = None


class WireOutputFormat(Wire):
    type: Literal["json_schema"]
    schema_: dict[str, Any] = Field(alias="schema")


class WireOutputConfig(Wire):
    format: WireOutputFormat | None = None
    effort: Literal["low", "medium", "high", "xhigh", "max"] | None = None
    """`high` only, the API's default and what every reply here is; another is refused (`_check_effort`)."""


class WireMetadata(Wire):
    user_id: str | None = None


class CountBody(Wire):
    """What `count_tokens` reads; a message request adds the generation controls."""

    model: str
    messages: Annotated[list[WireMessage], Field(min_length=1)]
    system: list[Block] | str | None = None
    tools: list[WireTool] | None = None
    tool_choice: WireToolChoice | None = None
    thinking: WireThinking | None = None
    output_config: WireOutputConfig | None = None
    output_format: WireOutputFormat | None = None  # the structured-outputs beta's spelling
    cache_control: WireCacheControl | None = None  # automatic prompt caching: see `AutoCache`


class MessagesBody(CountBody):
    max_tokens: Annotated[int, Field(ge=1)]
    stop_sequences: list[str] | None = None
    temperature: Annotated[float, Field(ge=0, le=1)] | None = None
    top_p: Annotated[float, Field(gt=0, le=1)] | None = None
    top_k: Annotated[int, Field(ge=0)] | None = None
    metadata: WireMetadata | None = None
    stream: bool | None = None
    speculative: bool | None = None  # ours: false, no drafted tokens (prompt lookup, grammar jump-forward)


_REQUIRED: dict[str, tuple[str, ...]] = {
    "text": ("text",),
    "tool_use": ("id", "name", "input"),
    "tool_result": ("tool_use_id",),
    "thinking": ("thinking",),
    "redacted_thinking": (),
    "image": ("source",),
}
_OPTIONAL: dict[str, tuple[str, ...]] = {
    "text": ("cache_control",),
    "tool_use": ("cache_control", "caller"),
    "tool_result": ("content", "is_error", "cache_control"),
    "image": ("cache_control",),
    "thinking": ("signature",),
    "redacted_thinking": ("data",),
}
"""Anthropic takes no `cache_control` on a thinking block: it is cached with its turn."""
_ALLOWED = {
    "user": ("text", "image", "tool_result"),
    "assistant": ("text", "tool_use", "thinking", "redacted_thinking"),
}


def parse(body: Any) -> Parsed[ChatRequest, AutoCache | None]:
    wire = validate(MessagesBody, body)
    sampling = SamplingParams(
        max_tokens=wire.max_tokens,
        temperature=1.0 if wire.temperature is None else wire.temperature,
        top_p=1.0 if wire.top_p is None else wire.top_p,
        top_k=wire.top_k or 0,
        stop=tuple(wire.stop_sequences or ()),
        speculative=wire.speculative is not False,
    )
    user = wire.metadata.user_id if wire.metadata else None
    request = replace(_request(wire, sampling, user), prompt_size_first=bool(wire.stream))
    return Parsed(request, None if wire.cache_control is None else AutoCache(), stream=bool(wire.stream))


def parse_count(body: Any) -> Parsed[ChatRequest, None]:
    return Parsed(_request(validate(CountBody, body), SamplingParams(), None), None)


def _request(wire: CountBody, sampling: SamplingParams, user: str | None) -> ChatRequest:
    _refuse_unsupported(wire)
    refuse_unrecognized(wire, handled=_HANDLED)
    _check_effort(wire.output_config)
    _check_thinking(wire.thinking, sampling.max_tokens)
    tools = custom_tools(wire.tools or ())
    choice, parallel = tool_choice(wire.tool_choice, tools)
    turns = [m for i, turn in enumerate(wire.messages) for m in _turn(turn, i)]
    return ChatRequest(
        model=wire.model,
        messages=(*_system(wire.system), *turns),
        sampling=replace(sampling, output_format=_output_format(wire)),
        user=user,
        tools=tools,
        tool_choice=choice,
        parallel_tool_calls=parallel,
        reasoning=_reasoning(wire.thinking),
    )


_HANDLED = ("mcp_servers", "service_tier", "thread")
"""Extras checked below. Either `service_tier` is honoured as it stands: there is one tier, and
every answer is a standard one (`standard_only` asks for nothing else, `auto` allows it)."""
_SERVICE_TIERS = ("auto", "standard_only")


def _refuse_unsupported(wire: CountBody) -> None:
    """Never ignore what a client relies on: say it is unsupported, naming the param."""
    extra = wire.model_extra or {}
    if extra.get("mcp_servers"):
        raise Unsupported("MCP servers are not supported by this server.", param="mcp_servers")
    if extra.get("thread") is not None:  # the SDK's tool runner sends `create`, and falls back on this refusal
        message = "Message threads are not supported: send the whole conversation without 'thread'."
        raise ThreadsUnsupported(message, param="thread")
    tier = extra.get("service_tier")
    if tier is not None and tier not in _SERVICE_TIERS:
        raise InvalidRequest(
            f"Invalid value for 'service_tier': {tier!r}; expected 'auto' or 'standard_only'.", param="service_tier"
        )


def _output_format(wire: CountBody) -> OutputFormat | None:
    """JSON output under a schema: `output_config.format`, or the beta's `output_format`."""
    if wire.output_config is not None and wire.output_config.format is not None:
        if wire.output_format is not None:
            raise InvalidRequest("Give 'output_config.format' or 'output_format', not both.", param="output_format")
        return json_schema(wire.output_config.format.schema_, "output_config.format.schema")
    if wire.output_format is not None:
        return json_schema(wire.output_format.schema_, "output_format.schema")
    return None


def _check_effort(config: WireOutputConfig | None) -> None:
    if config is not None and config.effort not in (None, "high"):
        param = "output_config.effort"
        raise Unsupported(f"'{param}' {config.effort!r} is not supported; only 'high', the default, is.", param=param)


def _reasoning(thinking: WireThinking | None) -> Reasoning | None:
    """`enabled` and `disabled` turn reasoning on and off; `adaptive` leaves it to the model."""
    if thinking is None or thinking.type == "adaptive":
        return None
    return Reasoning(enabled=thinking.type == "enabled", param="thinking", budget=thinking.budget_tokens)


def _check_thinking(thinking: WireThinking | None, max_tokens: int | None) -> None:
    """Anthropic's rules for a thinking budget, so clients learn early what Anthropic says."""
    param = "thinking.budget_tokens"
    if thinking is None or thinking.type != "enabled":
        if thinking is not None and thinking.budget_tokens is not None:
            raise InvalidRequest(f"'{param}' is only taken with thinking type 'enabled'.", param=param)
        return
    if thinking.budget_tokens is None:
        raise InvalidRequest(f"Missing required parameter: '{param}'.", param=param)
    if max_tokens is not None and thinking.budget_tokens >= max_tokens:
        raise InvalidRequest(f"'{param}' must be less than 'max_tokens'.", param=param)


def _system(system: list[Block] | str | None) -> tuple[Message, ...]:
    if isinstance(system, list):
        for i, block in enumerate(system):
            _check(block, f"system[{i}]", ("text",), "system prompt")
        system = "\n".join(checked_text(block.text or "", f"system[{i}].text") for block in system)
    return (Message(role="system", content=checked_text(system, "system")),) if system else ()


def _turn(turn: WireMessage, index: int) -> list[Message]:
    if isinstance(turn.content, str):
        return [Message(role=turn.role, content=checked_text(turn.content, f"messages[{index}].content"))]
    for j, block in enumerate(turn.content):
        _check(block, f"messages[{index}].content[{j}]", _ALLOWED[turn.role], f"{turn.role} turn")
    return [_assistant(turn.content)] if turn.role == "assistant" else _user(turn.content, index)


def _check(block: Block, param: str, allowed: Sequence[str], where: str) -> None:
    if block.type not in allowed:
        if block.type in _REQUIRED:
            raise InvalidRequest(f"A '{block.type}' block cannot appear in a {where}.", param=f"{param}.type")
        raise Unsupported(
            f"Content block type '{block.type}' is not supported; this model reads text only.", param=f"{param}.type"
        )
    for field in _REQUIRED[block.type]:
        if getattr(block, field) is None:
            raise InvalidRequest(f"Missing required parameter: '{param}.{field}'.", param=f"{param}.{field}")
    taken = {"type", *_REQUIRED[block.type], *_OPTIONAL.get(block.type, ())}
    for field in Block.model_fields:
        if field not in taken and getattr(block, field) is not None:
            message = f"Unrecognized parameter: '{param}.{field}'; a '{block.type}' block has no such field."
            raise InvalidRequest(message, param=f"{param}.{field}")
    if block.caller is not None:
        _check_caller(block.caller, f"{param}.caller")


def _check_caller(caller: Caller, param: str) -> None:
    if caller.type != "direct":
        message = f"A call made by '{caller.type}' is not taken: no code-execution tool runs here; only 'direct'."
        raise Unsupported(message, param=f"{param}.type")
    if caller.tool_id is not None:
        raise InvalidRequest(
            f"'{param}.tool_id' goes with a server tool's caller, not 'direct'.", param=f"{param}.tool_id"
        )


def _assistant(blocks: Sequence[Block]) -> Message:
    thinking = [b.thinking or "" for b in blocks if b.type == "thinking"]
    return Message(
        role="assistant",
        content="\n".join(b.text or "" for b in blocks if b.type == "text"),
        tool_calls=tuple(
            ToolCall(b.id or "", b.name or "", json.dumps(b.input or {}, ensure_ascii=False))
            for b in blocks
            if b.type == "tool_use"
        ),
        reasoning="\n".join(thinking) if thinking else None,
    )


def _user(blocks: Sequence[Block], index: int) -> list[Message]:
    """Tool results become tool turns, in order, ahead of the user's own text."""
    results = [
        Message(role="tool", content=_result(b, f"messages[{index}].content[{j}]"), tool_call_id=b.tool_use_id)
        for j, b in enumerate(blocks)
        if b.type == "tool_result"
    ]
    pieces = [_piece(b, f"messages[{index}].content[{j}]") for j, b in enumerate(blocks) if b.type != "tool_result"]
    if pieces or not results:
        text, images = joined(pieces, "\n")
        results.append(Message(role="user", content=text, images=images))
    return results


def _piece(block: Block, param: str) -> str | ImageInput:
    """A text block's text, or an image block's image: by `url`, or `base64` with its `media_type`."""
    source = block.source
    if block.type != "image" or source is None:  # an image's source is checked present (`_REQUIRED`)
        return checked_text(block.text or "", f"{param}.text")
    if source.type not in ("base64", "url"):
        raise Unsupported(
            f"Image source type '{source.type}' is not supported; base64 and url are.", param=f"{param}.source.type"
        )
    field = "data" if source.type == "base64" else "url"
    value = source.data if source.type == "base64" else source.url
    if value is None:
        raise InvalidRequest(f"Missing required parameter: '{param}.source.{field}'.", param=f"{param}.source.{field}")
    return base64_image(value, param, source.media_type) if source.type == "base64" else url_image(value, param)


def _result(block: Block, param: str) -> str:
    content = block.content or ""
    if isinstance(content, list):
        for k, part in enumerate(content):
            _check(part, f"{param}.content[{k}]", ("text",), "tool result")
        content = "\n".join(
            checked_text(part.text or "", f"{param}.content[{k}].text") for k, part in enumerate(content)
        )
    content = checked_text(content, f"{param}.content")
    return f"Error: {content}" if block.is_error else content


# -- rendering -------------------------------------------------------------------------------------------


def render(
    parsed: Parsed[ChatRequest, AutoCache | None], meta: Meta, events: Sequence[GenerationEvent]
) -> dict[str, Any]:
    return fold_message(meta, events, parsed.options)


def render_count(parsed: Parsed[ChatRequest, None], count: int) -> dict[str, int]:
    return {"input_tokens": count}


ROUTES: tuple[Route, ...] = (
    GenerateRoute(path="/messages", parse=parse, render=render, encoder=MessageStream, body=MessagesBody),
    CountRoute(path="/messages/count_tokens", parse=parse_count, render=render_count, body=CountBody),
)
