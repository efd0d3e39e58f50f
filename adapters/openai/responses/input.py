"""OpenAI Responses, the way in: `input` items validated, normalized, and turned into core messages.

Items are kept in one normalized wire form (what `input_items` lists, what `record` stores,
what `previous_response_id` replays), so a stored conversation is read back by the same
`messages()` that reads a fresh request.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict

from asgi_llm.core import ImageInput, InvalidRequest, Message, Role, ToolCall, Unsupported

from ...base import refuse_unrecognized, validate
from ...images import checked_text, joined, url_image
from .sealed import unseal

__all__ = ["Item", "Wire", "check_pairs", "messages", "normalize_input", "validate_at"]

Item = dict[str, Any]
"""One conversation item in normalized wire form: `message`, `function_call`, `function_call_output`, `reasoning`."""

M = TypeVar("M", bound=BaseModel)

_TEXT_PARTS = ("input_text", "output_text")
_ROLES: dict[str, Role] = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}


class Wire(BaseModel):
    """A wire object: strict, keeping unknown fields (see `refuse_unrecognized`)."""

    model_config = ConfigDict(extra="allow", strict=True)


class _Part(Wire):
    type: str
    text: str | None = None
    image_url: str | None = None
    detail: str | None = None
    file_id: str | None = None
    file_data: str | None = None  # an `input_file` part's (as `file_url`, `filename`), refused with its type
    file_url: str | None = None
    filename: str | None = None
    annotations: list[Any] | None = None  # an `output_text` part sent back as it came: its text is what counts
    logprobs: list[Any] | None = None
    refusal: str | None = None  # an assistant's `refusal` part: read as its words


class _Item(Wire):
    """What every item may carry back from an earlier output: its id, and its status then."""

    id: str | None = None
    status: Literal["in_progress", "completed", "incomplete"] | None = None


class _MessageItem(_Item):
    type: Literal["message"] = "message"
    role: Literal["user", "assistant", "system", "developer"]
    content: str | list[_Part]
    phase: Literal["commentary", "final_answer"] | None = None
    """Inert: an assistant message's place in a turn, which the SDK says to send back; the
    conversation's order already says it."""


class _FunctionCallItem(_Item):
    type: Literal["function_call"]
    call_id: str
    name: str
    arguments: str


class _FunctionCallOutputItem(_Item):
    type: Literal["function_call_output"]
    call_id: str
    output: str | list[_Part]


class _ReasoningText(Wire):
    type: Literal["summary_text", "reasoning_text"] | None = None
    text: str


class _ReasoningItem(_Item):
    type: Literal["reasoning"]
    summary: list[_ReasoningText] = []
    content: list[_ReasoningText] | None = None
    encrypted_content: str | None = None  # ours only: see `sealed.py`


def validate_at(model: type[M], data: Any, where: str) -> M:
    """`validate` for one element of a list, naming params from the body's root (`input[2].call_id`);
    one that is no object is refused in wire words, not by the model's class name."""
    if not isinstance(data, dict):
        raise InvalidRequest(f"Invalid value for '{where}': expected an object.", param=where)
    try:
        value = validate(model, data)
    except InvalidRequest as exc:
        param = f"{where}.{exc.param}" if exc.param else where
        raise InvalidRequest(exc.message.replace(f"'{exc.param}'", f"'{param}'"), param=param) from None
    refuse_unrecognized(value, prefix=f"{where}.")
    return value


def normalize_input(raw: str | Sequence[Any] | None) -> list[Item]:
    """The request's `input` as normalized items; refuses what this server cannot read, naming the param."""
    if raw is None:
        return []
    if isinstance(raw, str):
        return [_message_item("user", [checked_text(raw, "input")], None)]
    return [_item(entry, f"input[{i}]") for i, entry in enumerate(raw)]


def _item(raw: Any, where: str) -> Item:
    kind = raw.get("type", "message") if isinstance(raw, dict) else "message"
    reader = _READERS.get(kind)
    if reader is None:
        raise Unsupported(f"Input items of type '{kind}' are not supported by this server.", param=f"{where}.type")
    return reader(raw, where)


def _read_message(raw: Any, where: str) -> Item:
    message = validate_at(_MessageItem, raw, where)
    if message.phase is not None and message.role != "assistant":
        param = f"{where}.phase"
        raise InvalidRequest(f"'{param}' belongs on an assistant message, not a {message.role} one.", param=param)
    if isinstance(message.content, str) or message.role != "user":
        texts = _texts(message.content, f"{where}.content", message.role == "assistant")
        return _message_item(message.role, texts, message.id)
    return _with_id(
        {"type": "message", "role": message.role, "content": _parts(message.content, f"{where}.content")}, message.id
    )


def _read_call(raw: Any, where: str) -> Item:
    call = validate_at(_FunctionCallItem, raw, where)
    item = {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments}
    return _with_id(item, call.id)


def _read_call_output(raw: Any, where: str) -> Item:
    result = validate_at(_FunctionCallOutputItem, raw, where)
    output: Any = result.output
    if not isinstance(output, str):
        output = [{"type": "input_text", "text": text} for text in _texts(output, f"{where}.output")]
    return _with_id({"type": "function_call_output", "call_id": result.call_id, "output": output}, result.id)


def _read_reasoning(raw: Any, where: str) -> Item:
    thought = validate_at(_ReasoningItem, raw, where)
    item: Item = {"type": "reasoning", "summary": [{"type": "summary_text", "text": s.text} for s in thought.summary]}
    if thought.content is not None:
        item["content"] = [{"type": "reasoning_text", "text": c.text} for c in thought.content]
    elif thought.encrypted_content is not None:  # a client that keeps no state sends its reasoning back so
        text = unseal(thought.encrypted_content, f"{where}.encrypted_content")
        item["content"] = [{"type": "reasoning_text", "text": text}]
    return _with_id(item, thought.id)


_READERS: dict[str, Callable[[Any, str], Item]] = {
    "message": _read_message,
    "function_call": _read_call,
    "function_call_output": _read_call_output,
    "reasoning": _read_reasoning,
}


def _texts(content: str | list[_Part], where: str, assistant: bool = False) -> list[str]:
    """Text parts' texts (and an assistant's `refusal` parts', its words too)."""
    if isinstance(content, str):
        return [checked_text(content, where)]
    texts = []
    for j, part in enumerate(content):
        if assistant and part.type == "refusal":
            if part.refusal is None:
                param = f"{where}[{j}].refusal"
                raise InvalidRequest(f"Missing required parameter: '{param}'.", param=param)
            texts.append(checked_text(part.refusal, f"{where}[{j}].refusal"))
            continue
        if part.type not in _TEXT_PARTS:
            raise Unsupported(f"Content part type '{part.type}' is not supported here.", param=f"{where}[{j}].type")
        texts.append(_text(part, f"{where}[{j}]"))
    return texts


def _text(part: _Part, where: str) -> str:
    if part.text is None:
        raise InvalidRequest(f"Missing required parameter: '{where}.text'.", param=f"{where}.text")
    return checked_text(part.text, f"{where}.text")


def _parts(content: list[_Part], where: str) -> list[Item]:
    """A user's (or system's) parts: text, and `input_image` by URL (checked here, read later)."""
    parts: list[Item] = []
    for j, part in enumerate(content):
        if part.type in _TEXT_PARTS:
            parts.append({"type": "input_text", "text": _text(part, f"{where}[{j}]")})
            continue
        if part.type != "input_image":
            raise Unsupported(f"Content part type '{part.type}' is not supported here.", param=f"{where}[{j}].type")
        if part.file_id is not None:
            param = f"{where}[{j}].file_id"
            raise Unsupported(
                "Images by 'file_id' are not supported: this server keeps no files; send 'image_url'.", param=param
            )
        if part.image_url is None:
            raise InvalidRequest(
                f"Missing required parameter: '{where}[{j}].image_url'.", param=f"{where}[{j}].image_url"
            )
        url_image(part.image_url, f"{where}[{j}]", part.detail)  # refused now, not when replayed
        parts.append({"type": "input_image", "image_url": part.image_url, "detail": part.detail or "auto"})
    return parts


def _message_item(role: str, texts: Iterable[str], item_id: str | None) -> Item:
    if role == "assistant":
        parts = [{"type": "output_text", "text": t, "annotations": [], "logprobs": []} for t in texts]
    else:
        parts = [{"type": "input_text", "text": t} for t in texts]
    return _with_id({"type": "message", "role": role, "content": parts}, item_id)


def _with_id(item: Item, item_id: str | None) -> Item:
    """Ids come first when the client gave one; `record` numbers the rest."""
    head = {"id": item_id} if item_id is not None else {}
    return {**head, **item, "status": "completed"}


def check_pairs(history: Sequence[Item], items: Sequence[Item]) -> None:
    """Function calls and their outputs pair up as OpenAI pairs them: an output answers a call
    made before it (in `history`, a stored conversation, or earlier in `items`, the request's
    `input`), and every call has its output by the end of `items`."""
    answered: dict[str, bool] = {}
    for item in history:
        if item["type"] in ("function_call", "function_call_output"):
            answered[item["call_id"]] = item["type"] == "function_call_output"
    for i, item in enumerate(items):
        call_id: str = item.get("call_id", "")
        if item["type"] == "function_call":
            answered[call_id] = False
        elif item["type"] == "function_call_output":
            if call_id not in answered:
                raise InvalidRequest(
                    f"No tool call found for function call output with call_id {call_id}.", param=f"input[{i}].call_id"
                )
            answered[call_id] = True
    for call_id, done in answered.items():
        if not done:
            raise InvalidRequest(f"No tool output found for function call {call_id}.", param="input")


def messages(instructions: str | None, items: Iterable[Item], first: int = 0) -> tuple[Message, ...]:
    """Core messages for normalized items: consecutive function calls share one assistant turn,
    and reasoning rides on the assistant turn that follows it. The request's `input` begins at
    item `first` (those before are a stored conversation's), which names an image's part."""
    out: list[Message] = [Message("system", checked_text(instructions, "instructions"))] if instructions else []
    thinking: list[str] = []
    for i, item in enumerate(items):
        where = f"input[{i - first}]" if i >= first else None  # a stored item's image: previous_response_id
        kind = item["type"]
        if kind == "reasoning":
            thinking.append(_reasoning_text(item))
            continue
        reasoning = "".join(thinking) or None
        if kind == "function_call":
            _add_call(out, ToolCall(item["call_id"], item["name"], item["arguments"]), reasoning)
        elif thinking and (kind != "message" or item["role"] != "assistant"):
            out.append(Message("assistant", "", reasoning=reasoning))
            out.append(_message(item, None, where))
        else:
            out.append(_message(item, reasoning, where))
        thinking.clear()
    if thinking:
        out.append(Message("assistant", "", reasoning="".join(thinking)))
    return tuple(out)


def _add_call(out: list[Message], call: ToolCall, reasoning: str | None) -> None:
    last = out[-1] if out else None
    if reasoning is None and last is not None and last.role == "assistant":
        out[-1] = Message("assistant", last.content, tool_calls=(*last.tool_calls, call), reasoning=last.reasoning)
    else:
        out.append(Message("assistant", "", tool_calls=(call,), reasoning=reasoning))


def _message(item: Item, reasoning: str | None, where: str | None) -> Message:
    if item["type"] == "function_call_output":
        output = item["output"]
        text = output if isinstance(output, str) else "".join(part["text"] for part in output)
        return Message("tool", text, tool_call_id=item["call_id"])
    pieces: list[str | ImageInput] = [
        url_image(part["image_url"], f"{where}.content[{j}]" if where else "previous_response_id", part.get("detail"))
        if part["type"] == "input_image"
        else part["text"]
        for j, part in enumerate(item["content"])
    ]
    text, images = joined(pieces)
    return Message(_ROLES[item["role"]], text, reasoning=reasoning, images=images)


def _reasoning_text(item: Item) -> str:
    parts = item.get("content") or item.get("summary") or ()
    return "".join(part["text"] for part in parts)
