"""OpenAI chat's messages: their wire shapes, each role's own fields, and their content read into
the core's `Message`s (text, with the image marker where each user image was)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Literal

from asgi_llm.core import ImageInput, InvalidRequest, Message, ToolCall, Unsupported

from ..images import checked_text, joined, url_image
from .common import Wire

__all__ = ["ContentPart", "ImageUrl", "WireFunctionCall", "WireMessage", "WireToolCall", "message", "noted"]


class ImageUrl(Wire):
    url: str
    detail: str | None = None


class ContentPart(Wire):
    type: str
    text: str | None = None
    image_url: ImageUrl | None = None
    input_audio: dict[str, Any] | None = None  # an `input_audio` part's, refused with its type
    file: dict[str, Any] | None = None  # a `file` part's, refused with its type


class WireFunctionCall(Wire):
    name: str
    arguments: str


class WireToolCall(Wire):
    id: str
    type: Literal["function"] = "function"
    function: WireFunctionCall


class WireMessage(Wire):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[WireToolCall] | None = None
    tool_call_id: str | None = None


def noted(messages: tuple[Message, ...], note: str) -> tuple[Message, ...]:
    """The conversation with `note` ending its system message (one made for it if none leads)."""
    first = messages[0]
    if first.role == "system":
        return (replace(first, content=f"{first.content}\n\n{note}" if first.content else note), *messages[1:])
    return (Message(role="system", content=note), *messages)


def message(wire: WireMessage, index: int) -> Message:
    """Message `index` of a chat, for the core (a developer's turn is a system one)."""
    role = "system" if wire.role == "developer" else wire.role
    _check_fields(wire, f"messages[{index}]")
    calls = tuple(ToolCall(c.id, c.function.name, c.function.arguments) for c in wire.tool_calls or ())
    text, images = _content(wire.content, f"messages[{index}].content", wire.role == "user")
    return Message(role, text, wire.name, calls, wire.tool_call_id, images=images)


def _check_fields(message: WireMessage, where: str) -> None:
    """Each role's own fields: content but on an assistant's turn, calls on an assistant's
    only, a call's id on a tool's only (elsewhere they would be dropped)."""
    role = message.role
    if role == "tool" and message.tool_call_id is None:
        raise InvalidRequest("A tool message needs the 'tool_call_id' it answers.", param=f"{where}.tool_call_id")
    if message.tool_call_id is not None and role != "tool":
        param = f"{where}.tool_call_id"
        raise InvalidRequest(f"'{param}' belongs on a tool message, not a {role} one.", param=param)
    if message.tool_calls and role != "assistant":
        param = f"{where}.tool_calls"
        raise InvalidRequest(f"'{param}' belongs on an assistant message, not a {role} one.", param=param)
    if role != "assistant" and (message.content is None or message.content == []):
        param = f"{where}.content"
        said = f"Missing required parameter: '{param}'" if message.content is None else f"'{param}' is empty"
        raise InvalidRequest(f"{said}; a {role} message needs its content.", param=param)


def _content(content: str | list[ContentPart] | None, param: str, user: bool) -> tuple[str, tuple[ImageInput, ...]]:
    """The text, with the image marker where each `image_url` part was (user turns only)."""
    if content is None or isinstance(content, str):
        return checked_text(content or "", param), ()
    pieces: list[str | ImageInput] = []
    for j, part in enumerate(content):
        where, image = f"{param}[{j}]", part.image_url
        if part.type == "image_url" and user:
            if image is None:
                raise InvalidRequest(f"Missing required parameter: '{where}.image_url'.", param=f"{where}.image_url")
            pieces.append(url_image(image.url, where, image.detail))
        elif part.type in ("text", "input_text") and part.text is not None:
            pieces.append(checked_text(part.text, f"{where}.text"))
        else:
            role = "" if user or part.type != "image_url" else " outside a user's message"
            raise Unsupported(f"Content part type '{part.type}' is not supported{role}.", param=f"{where}.type")
    return joined(pieces)
