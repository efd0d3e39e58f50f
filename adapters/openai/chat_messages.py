"""OpenAI chat's messages: their wire shapes, each role's own fields, and their content read into
the core's `Message`s (text, with the image marker where each user image was)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Literal

from asgi_llm.core import ImageInput, InvalidRequest, Message, ToolCall, Unsupported

from ..images import checked_text, joined, url_image
from .common import Wire

__all__ = [
    "CacheControl",
    "ContentPart",
    "ImageUrl",
    "WireFunctionCall",
    "WireMessage",
    "WireToolCall",
    "format_note",
    "message",
    "noted",
]


class ImageUrl(Wire):
    url: str
    detail: str | None = None


class CacheControl(Wire):
    """Anthropic's prompt-caching breakpoint, which LiteLLM and Cline put on chat parts and
    messages: inert, as Anthropic's own breakpoints are here, since every prefix is cached
    anyway (docs/protocols.md, Prompt caching). Only this exact shape: another is refused."""

    type: Literal["ephemeral"]


class ContentPart(Wire):
    type: str
    text: str | None = None
    image_url: ImageUrl | None = None
    refusal: str | None = None  # an assistant's `refusal` part: read as its words
    input_audio: dict[str, Any] | None = None  # an `input_audio` part's, refused with its type
    file: dict[str, Any] | None = None  # a `file` part's, refused with its type
    cache_control: CacheControl | None = None


class WireFunctionCall(Wire):
    name: str
    arguments: str
    parsed_arguments: Any = None
    """Inert: the openai SDK's own parse of `arguments` (`pydantic_function_tool`), sent back
    with the call; `arguments` is what counts."""


class WireToolCall(Wire):
    index: int | None = None
    """Inert: the call's place in a stream, which the openai SDK's (and LangChain's, LiteLLM's)
    accumulator keeps on the calls it builds and sends back; the list's order is what counts."""
    id: str
    type: Literal["function"] = "function"
    function: WireFunctionCall


class WireMessage(Wire):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[WireToolCall] | None = None
    tool_call_id: str | None = None
    reasoning_content: str | None = None
    """An assistant's reasoning, as this server's replies name it (llama.cpp's, DeepSeek's)."""
    reasoning: str | None = None
    """The same, as vLLM and OpenRouter name it; one of the two, not both."""
    parsed: Any = None
    """Inert: the openai SDK's own parse of `content` (`chat.completions.parse`), sent back."""
    annotations: list[Any] | None = None
    """Inert: what OpenAI's replies carry (`[]`; URL citations), sent back; `content` counts."""
    refusal: str | None = None
    """What an assistant said in refusing (OpenAI's replies carry it beside `content`): its words."""
    cache_control: CacheControl | None = None


def format_note(name: str, description: str | None) -> str | None:
    """A JSON schema format's description, for the model to read, as a tool's description is
    (chat's `response_format.json_schema`, Responses' `text.format`)."""
    return f"Answer in the JSON format '{name}': {description}" if description else None


def noted(messages: tuple[Message, ...], note: str) -> tuple[Message, ...]:
    """The conversation with `note` ending its system message (one made for it if none leads)."""
    first = messages[0]
    if first.role == "system":
        return (replace(first, content=f"{first.content}\n\n{note}" if first.content else note), *messages[1:])
    return (Message(role="system", content=note), *messages)


def message(wire: WireMessage, index: int) -> Message:
    """Message `index` of a chat, for the core (a developer's turn is a system one)."""
    role = "system" if wire.role == "developer" else wire.role
    where = f"messages[{index}]"
    _check_fields(wire, where)
    calls = tuple(ToolCall(c.id, c.function.name, c.function.arguments) for c in wire.tool_calls or ())
    text, images = _content(wire.content, f"{where}.content", wire.role)
    if wire.refusal:
        refusal = checked_text(wire.refusal, f"{where}.refusal")
        text = f"{text}\n{refusal}" if text else refusal
    return Message(role, text, wire.name, calls, wire.tool_call_id, reasoning=_reasoning(wire, where), images=images)


def _assistants_own(m: WireMessage) -> dict[str, Any]:
    """The fields of an assistant's turn only, by name: on another turn they would be dropped."""
    return {
        "tool_calls": m.tool_calls,
        "reasoning_content": m.reasoning_content,
        "reasoning": m.reasoning,
        "parsed": m.parsed,
        "annotations": m.annotations,
        "refusal": m.refusal,
    }


def _check_fields(message: WireMessage, where: str) -> None:
    """Each role's own fields: content but on an assistant's turn, calls (and the rest of
    `_assistants_own`) on an assistant's only, a call's id on a tool's only."""
    role = message.role
    if role == "tool" and message.tool_call_id is None:
        raise InvalidRequest("A tool message needs the 'tool_call_id' it answers.", param=f"{where}.tool_call_id")
    if message.tool_call_id is not None and role != "tool":
        param = f"{where}.tool_call_id"
        raise InvalidRequest(f"'{param}' belongs on a tool message, not a {role} one.", param=param)
    for name, value in _assistants_own(message).items() if role != "assistant" else ():
        if value not in (None, []):
            param = f"{where}.{name}"
            raise InvalidRequest(f"'{param}' belongs on an assistant message, not a {role} one.", param=param)
    if role != "assistant" and (message.content is None or message.content == []):
        param = f"{where}.content"
        said = f"Missing required parameter: '{param}'" if message.content is None else f"'{param}' is empty"
        raise InvalidRequest(f"{said}; a {role} message needs its content.", param=param)


def _reasoning(message: WireMessage, where: str) -> str | None:
    """An assistant's reasoning, by either name (`_assistants_own` keeps it off other turns)."""
    if message.reasoning is not None and message.reasoning_content is not None:
        param = f"{where}.reasoning"
        raise InvalidRequest(f"Give '{param}' or '{where}.reasoning_content', not both.", param=param)
    if message.reasoning is not None:
        return checked_text(message.reasoning, f"{where}.reasoning")
    if message.reasoning_content is not None:
        return checked_text(message.reasoning_content, f"{where}.reasoning_content")
    return None


_PART_FIELDS = {"text": "text", "input_text": "text", "image_url": "image_url", "refusal": "refusal"}
"""Each readable part type's own field: another type's field on a part would be dropped."""


def _content(content: str | list[ContentPart] | None, param: str, role: str) -> tuple[str, tuple[ImageInput, ...]]:
    """The text, with the image marker where each `image_url` part was (user turns only), and
    an assistant's `refusal` parts as its words."""
    if content is None or isinstance(content, str):
        return checked_text(content or "", param), ()
    pieces: list[str | ImageInput] = []
    for j, part in enumerate(content):
        where, image = f"{param}[{j}]", part.image_url
        _check_part(part, where)
        if part.type == "image_url" and role == "user":
            if image is None:
                raise InvalidRequest(f"Missing required parameter: '{where}.image_url'.", param=f"{where}.image_url")
            pieces.append(url_image(image.url, where, image.detail))
        elif part.type in ("text", "input_text") and part.text is not None:
            pieces.append(checked_text(part.text, f"{where}.text"))
        elif part.type == "refusal" and role == "assistant" and part.refusal is not None:
            pieces.append(checked_text(part.refusal, f"{where}.refusal"))
        else:
            outside = {"image_url": " outside a user's message", "refusal": " outside an assistant's message"}
            said = outside.get(part.type, "")
            raise Unsupported(f"Content part type '{part.type}' is not supported{said}.", param=f"{where}.type")
    return joined(pieces)


def _check_part(part: ContentPart, where: str) -> None:
    """A readable part carries its own type's field only (and `cache_control`)."""
    own = _PART_FIELDS.get(part.type)
    for name in part.model_fields_set - {"type", "cache_control", own} if own else ():
        param = f"{where}.{name}"
        raise InvalidRequest(f"'{param}' does not belong on a '{part.type}' part.", param=param)
