"""Forced tool calls: the schema a call is decoded under, and its text turned into call events. Pure.

A forced call is decoded as JSON, `{"name": ..., "arguments": {...}}` (or an array of them
when parallel calls are allowed), under a grammar built from `CallPlan.form`. `forced_calls`
watches the decoded text and sends each call on as `ToolCallStart` / `ToolCallDelta`s /
`ToolCallEnd`, its arguments as they are written (`call_stream.py` reads the text); the text
itself never leaves.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ...core.errors import InternalError, Unsupported
from ...core.events import Finish, GenerationEvent, TextDelta, ToolCallDelta, ToolCallEnd, ToolCallStart
from ...core.requests import Message, ToolChoice, ToolSpec
from .call_stream import CallBegun, CallDone, CallScanner, CallText
from .checks import Validator
from .compiled import Grammars
from .forms import Choice, Closed, Form, Items, Rewritten, values_of
from .grammar import literal_safe
from .walk import Unsatisfiable

__all__ = [
    "CallPlan",
    "JsonValues",
    "Repeats",
    "canonical_json",
    "checked_call",
    "forced_calls",
    "plan_calls",
    "with_calls_as_text",
    "with_tools_note",
]

log = logging.getLogger("asgi_llm.engine")

MAX_PARALLEL_CALLS = 8
_NO_PARAMETERS = {"type": "object", "properties": {}, "additionalProperties": False}


@dataclass(frozen=True)
class CallPlan:
    """What a forced call is decoded under (`form`) and checked against (`checks`, by tool name)."""

    form: Rewritten
    checks: Mapping[str, Validator]
    parallel: bool


def plan_calls(
    tools: Sequence[ToolSpec],
    choice: ToolChoice,
    parallel: bool,
    *,
    keys: Sequence[str] = ("arguments",),
    grammars: Grammars | None = None,
) -> CallPlan:
    """`choice` is "required" (any of `tools`) or a tool's name; parallel calls only with "required".

    `keys` are the names the arguments may go under (Llama 3 writes "parameters"); each tool's
    parameters are compiled through `grammars` (the engine's, which keeps them), or anew. A tool
    whose parameters no call can satisfy is left out, with a warning (a 400 when it is the one named,
    or when none is left).
    """
    grammars = grammars if grammars is not None else Grammars(entries=0)
    unusable: Unsatisfiable | None = None
    options: list[Form] = []
    tools_forms: list[Rewritten] = []
    checks: dict[str, Validator] = {}
    for i, tool in enumerate(tools):
        if choice not in ("required", tool.name) or tool.name in checks:
            continue
        if not literal_safe(tool.name):
            raise Unsupported(
                "A tool name with backslashes, quotes or control characters cannot be decoded.", param=f"tools[{i}]"
            )
        parameters = tool.parameters or _NO_PARAMETERS  # no parameters: an empty argument list
        try:
            enforced = grammars.enforced(parameters, f"tools[{i}]", root_type="object")
        except Unsatisfiable as exc:  # no call of it could be valid: it is not offered
            if choice == tool.name:
                raise
            log.warning("tool %r is not offered: %s", tool.name, exc)
            unusable = exc
            continue
        checks[tool.name] = enforced.check
        tools_forms.append(enforced.form)
        name = values_of([tool.name])
        options += [Closed((("name", name), (key, enforced.form.root)), ("name", key)) for key in keys]
    if not options and unusable is not None:
        raise unusable
    if not options:
        raise InternalError("A forced tool call names no tool of the request's.")
    call = options[0] if len(options) == 1 else Choice(tuple(options))
    if not (parallel and choice == "required"):
        return CallPlan(Rewritten.around(call, tools_forms), checks, parallel=False)
    array = Items(call, 1, MAX_PARALLEL_CALLS)
    return CallPlan(Rewritten.around(array, tools_forms), checks, parallel=True)


def with_tools_note(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> tuple[Message, ...]:
    """The conversation with the tools described in its system message, for chat templates that
    have no place for tools: a forced call is still decoded under its grammar, but the model
    should know what the tools are for."""
    listed = [
        {"name": t.name, **({"description": t.description} if t.description else {}), "parameters": dict(t.parameters)}
        for t in tools
    ]
    note = (
        "You can call these tools:\n"
        + json.dumps(listed, ensure_ascii=False)
        + '\nTo call a tool, answer with JSON: {"name": <the tool\'s name>, "arguments": <its arguments>}.'
    )
    messages = with_calls_as_text(messages)
    if messages and messages[0].role == "system":
        first = messages[0]
        return (replace(first, content=f"{first.content}\n\n{note}" if first.content else note), *messages[1:])
    return (Message(role="system", content=note), *messages)


def with_calls_as_text(messages: Sequence[Message]) -> tuple[Message, ...]:
    """The conversation with each earlier turn's calls written into its text (`_calls_as_text`),
    for a template with no place for tools, whether or not tools are offered now."""
    return tuple(_calls_as_text(m) if m.tool_calls else m for m in messages)


def _calls_as_text(message: Message) -> Message:
    """An earlier turn's calls written into its text the way the note asks for them (an array
    when there are several): a template with no place for tools would drop them, and the
    model would see a turn in which it said nothing."""
    calls = [{"name": c.name, "arguments": _arguments(c.arguments)} for c in message.tool_calls]
    written = json.dumps(calls[0] if len(calls) == 1 else calls, ensure_ascii=False)
    content = f"{message.content}\n{written}" if message.content else written
    return replace(message, content=content, tool_calls=())


def _arguments(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


class JsonValues:
    """The complete objects and arrays at one nesting `level` of a JSON text fed piece by piece.

    Level 0 is the text's own value; level 1 the elements of a top-level array.
    """

    def __init__(self, level: int) -> None:
        self._level = level
        self._depth = 0
        self._in_string = False
        self._escaped = False
        self._current: list[str] | None = None

    def feed(self, text: str) -> list[str]:
        done: list[str] = []
        for ch in text:
            if self._current is not None:
                self._current.append(ch)
            if self._in_string:
                self._escaped, self._in_string = (False, True) if self._escaped else (ch == "\\", ch != '"')
            elif ch == '"':
                self._in_string = True
            elif ch in "{[":
                if self._depth == self._level:
                    self._current = [ch]
                self._depth += 1
            elif ch in "}]":
                self._depth -= 1
                if self._depth == self._level and self._current is not None:
                    done.append("".join(self._current))
                    self._current = None
        return done


def canonical_json(text: str) -> str:
    """`text`'s JSON value written one way (keys sorted), so that equal values compare equal."""
    return json.dumps(json.loads(text), sort_keys=True)


class Repeats:
    """A response's calls in order: once one repeats an earlier call (same tool, same arguments
    in any key order), it and every call after it are past the response's end."""

    def __init__(self) -> None:
        self._sent: set[tuple[str, str]] = set()
        self._ended = False

    def past_end(self, name: str, arguments: str) -> bool:
        same = (name, canonical_json(arguments))
        self._ended = self._ended or same in self._sent
        self._sent.add(same)
        return self._ended


def checked_call(scan: CallDone, checks: Mapping[str, Validator]) -> tuple[str, str]:
    """A decoded call's tool name and arguments (under "arguments", or Llama's "parameters"),
    checked against the tool's schema.

    The arguments are the model's own text of the value (the text streamed), not a re-encoding.
    """
    try:
        call = json.loads(scan.text)
        name, arguments = call["name"], call["arguments" if "arguments" in call else "parameters"]
        valid = checks[name].is_valid(arguments)
        encoded = json.dumps(arguments, ensure_ascii=False, allow_nan=False)  # no NaN nor Infinity
    except (ValueError, KeyError, TypeError):
        valid = False
    if not valid:
        raise InternalError("The model produced a tool call that does not match the tool's schema.")
    return name, scan.arguments or encoded


def forced_calls(
    events: Iterable[GenerationEvent | None], plan: CallPlan, new_id: Callable[[], str]
) -> Iterator[GenerationEvent | None]:
    """One choice's decoded events, its text turned into tool-call events.

    A call's arguments stream as they are decoded: `ToolCallStart` once its name is known and its
    arguments have begun, a `ToolCallDelta` per piece of their text, and `ToolCallEnd` once the
    call's object is complete and checked (a call off its schema ends the stream with an error).
    A call to a tool called before in the choice is held until complete, since it may repeat an
    earlier call: a call that repeats one (same tool, same arguments) is not sent, nor any after
    it: the engine ends the output there, and what the grammar makes it write to close is no call
    of the model's. A choice that ends on its own ends with reason "tool_calls"; one cut off by its
    token limit keeps "length", and ends a call it was streaming where it was cut.
    """
    scanner = CallScanner(1 if plan.parallel else 0)
    count = 0
    repeats = Repeats()
    ended = False
    named: set[str] = set()
    streaming = False  # the open call's arguments are being sent
    for event in events:
        if isinstance(event, TextDelta):
            i = event.index
            for scan in () if ended else scanner.feed(event.text):
                if isinstance(scan, CallBegun):
                    streaming = scan.name in plan.checks and scan.name not in named
                    if streaming:
                        yield ToolCallStart(new_id(), scan.name, index=i, call_index=count)
                elif isinstance(scan, CallText):
                    if streaming:
                        yield ToolCallDelta(scan.text, index=i, call_index=count)
                else:
                    name, arguments = checked_call(scan, plan.checks)
                    if ended := repeats.past_end(name, arguments):
                        break
                    if not streaming:
                        yield ToolCallStart(new_id(), name, index=i, call_index=count)
                        yield ToolCallDelta(arguments, index=i, call_index=count)
                    yield ToolCallEnd(index=i, call_index=count)
                    named.add(name)
                    streaming = False
                    count += 1
        elif isinstance(event, Finish):
            if event.reason == "length":
                if streaming:  # cut off inside the call's arguments
                    yield ToolCallEnd(index=event.index, call_index=count)
                yield event
                continue
            if not count or streaming:
                raise InternalError("The model stopped before completing a forced tool call.")
            yield replace(event, reason="tool_calls", stop_sequence=None)
        else:
            yield event
