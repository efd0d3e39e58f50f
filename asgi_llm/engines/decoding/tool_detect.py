"""Tool calls found in a model's free text (`tool_choice: auto`), while it streams. Pure.

Models write calls in their own syntax: Hermes and Qwen wrap JSON in `<tool_call>...</tool_call>`,
Mistral puts a JSON array after `[TOOL_CALLS]`, Llama 3 a JSON object after `<|python_tag|>` (or
bare), and a model told about tools in its system prompt answers with a bare JSON object. The
detector passes text through, holding back only what may be the start of a marker; once a call
begins it collects it, and sends it on as a `Call` only if it names a tool and its arguments
validate. Anything else goes out as the text it was: never a broken call.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

from ...core.events import Finish, GenerationEvent, TextDelta, TokenLogprob, ToolCallDelta, ToolCallEnd, ToolCallStart
from .checks import Validator
from .grammar import as_rule, relax_space
from .held_calls import HeldCalls
from .tool_calls import Repeats

__all__ = [
    "MARKERS",
    "Call",
    "CallDetector",
    "call_level",
    "detected_calls",
    "json_end",
    "trigger_grammar",
    "trigger_grammars",
]

MARKERS = {"<tool_call>": "</tool_call>", "[TOOL_CALLS]": None, "<|python_tag|>": None}
"""Each marker that opens calls, and the one that closes each call (None: the JSON value ends it)."""


@dataclass(frozen=True)
class Call:
    name: str
    arguments: str
    """A JSON object, as text."""


Output = str | Call


class JsonEnd:
    """Where the JSON object or array a text starts with (after whitespace) ends, read a piece at a
    time: each character is scanned once however the text arrives (a call decoded token by token
    would otherwise be scanned again from its start at every token)."""

    def __init__(self) -> None:
        self.seen = 0  # characters scanned so far
        self._depth, self._in_string, self._escaped = 0, False, False
        self._end: int | None = None

    def feed(self, text: str) -> int | None:
        """`text`, the next characters: the end (an index into everything fed), None while the
        value goes on, -1 if what was fed does not start with an object or array."""
        if self._end is not None:
            return self._end
        depth, in_string, escaped = self._depth, self._in_string, self._escaped
        for i, ch in enumerate(text, self.seen):
            if in_string:
                escaped, in_string = (False, True) if escaped else (ch == "\\", ch != '"')
            elif depth == 0 and ch not in "{[":
                if not ch.isspace():
                    self._end = -1
                    break
            elif ch == '"':
                in_string = True
            elif ch in "{[":
                depth += 1
            elif ch in "}]":
                depth -= 1
                if depth == 0:
                    self._end = i + 1
                    break
        self.seen += len(text)
        self._depth, self._in_string, self._escaped = depth, in_string, escaped
        return self._end


def json_end(text: str) -> int | None:
    """Where the JSON object or array that `text` starts with (after whitespace) ends; None if it has
    not ended yet, -1 if `text` does not start with one."""
    return JsonEnd().feed(text)


class CallDetector:
    """Feed text as it is decoded; get back text and calls, in order. `finish()` flushes the rest.

    `checks` maps each tool's name to its argument schema's validator.
    """

    def __init__(self, checks: Mapping[str, Validator]) -> None:
        self._checks = checks
        self._held = ""
        self._marker: str | None = None  # the open call's marker ("" for a bare JSON call)
        self._spoken = False  # whether any text other than whitespace went out
        self._bare = JsonEnd()  # the open bare call's scan, kept across feeds

    @property
    def in_call(self) -> bool:
        return self._marker is not None

    @property
    def marker(self) -> str | None:
        """The open call's marker: "" for a bare JSON call, None outside a call."""
        return self._marker

    @property
    def call_text(self) -> str:
        """The open call's text after its marker, so far."""
        return self._held[len(self._marker or "") :] if self._marker is not None else ""

    def feed(self, text: str) -> list[Output]:
        self._held += text
        out: list[Output] = []
        while True:
            step = self._call_step() if self._marker is not None else self._text_step()
            if step is None:
                return out
            out += step

    def finish(self) -> list[Output]:
        """Whatever is still held, as text: an unfinished call is not a call. Whitespace alone
        (before or after calls) is not worth a message."""
        held, self._held, self._marker = self._held, "", None
        return [held] if held.strip() or (held and self._spoken) else []

    def _text_step(self) -> list[Output] | None:
        held = self._held
        found = [(held.find(m), m) for m in MARKERS if m in held]
        if found:
            at, marker = min(found)
            self._marker, self._held = marker, held[at:]
            before = held[:at]
            return self._say(before) if self._spoken or before.strip() else []
        if not self._spoken:
            start = held.lstrip()
            if not start or any(m.startswith(start) for m in MARKERS):
                return None  # a marker or a bare call may still follow
            if start[0] in "{[":
                self._marker, self._held = "", start  # a bare JSON call, looked for only before any text
                self._bare = JsonEnd()
                return []
        keep = _partial_marker(held)
        self._held = held[len(held) - keep :] if keep else ""
        said = self._say(held[: len(held) - keep])
        return said or None

    def _call_step(self) -> list[Output] | None:
        marker = self._marker or ""
        body = self._held[len(marker) :]
        closer = MARKERS.get(marker)
        if closer is not None:
            end = body.find(closer)
            if end == -1:
                return None
            inner, after = body[:end], body[end + len(closer) :]
            if json_end(inner) != len(inner.rstrip()):
                return self._give_up()
        else:
            stop = self._bare.feed(body[self._bare.seen :])
            if stop is None:
                return None
            if stop == -1:
                return self._give_up()
            inner, after = body[:stop], body[stop:]
        calls = _calls(inner, self._checks)
        if calls is None:
            return self._give_up()
        self._marker, self._held = None, after
        return list(calls)

    def _give_up(self) -> list[Output]:
        """Not a call after all: its text goes out as text, and no more calls are looked for."""
        held, self._held, self._marker = self._held, "", None
        self._spoken = True
        return self._say(held)

    def _say(self, text: str) -> list[Output]:
        if text.strip():
            self._spoken = True
        return [text] if text else []


def _partial_marker(text: str) -> int:
    """The length of the longest end of `text` that begins a marker."""
    best = 0
    for marker in MARKERS:
        for size in range(min(len(marker) - 1, len(text)), best, -1):
            if text.endswith(marker[:size]):
                best = size
                break
    return best


def _calls(text: str, checks: Mapping[str, Validator]) -> list[Call] | None:
    """The calls a JSON object or array holds, each naming a tool, its arguments valid; else None."""
    try:
        value = json.loads(text)
    except ValueError:
        return None
    items = value if isinstance(value, list) else [value]
    calls = [_call(item, checks) for item in items]
    if not calls or any(call is None for call in calls):
        return None
    return [call for call in calls if call is not None]


def _call(item: Any, checks: Mapping[str, Validator]) -> Call | None:
    """`{"name", "arguments"}`, or Llama's `"parameters"`; arguments may come as JSON text."""
    if not isinstance(item, dict):
        return None
    name = item.get("name")
    arguments = item.get("arguments", item.get("parameters"))
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return None
    if not isinstance(name, str) or name not in checks or not isinstance(arguments, dict):
        return None
    try:
        if not checks[name].is_valid(arguments):
            return None
    except Exception:  # noqa: BLE001 (a tool schema this server did not need to check until now)
        return None
    try:
        return Call(name, json.dumps(arguments, ensure_ascii=False, allow_nan=False))
    except ValueError:
        return None


_MORE_CALLS = "{0,7}"


def trigger_grammar(call_gbnf: str, marker: str, call_text: str, parallel: bool) -> str:
    """The grammar for the rest of the output once a call has begun: the call's text after
    `marker` (its start so far is `call_text`), more calls if `parallel`, and nothing after.

    `call_gbnf` is the grammar of one call object. Whitespace may lead, as a tokenizer may add it.
    """
    rules = as_rule(relax_space(call_gbnf), "tool-call")
    if marker == "<tool_call>":
        one = 'tool-ws tool-call tool-ws "</tool_call>"'
        root = one + (f' (tool-ws "<tool_call>" {one}){_MORE_CALLS}' if parallel else "")
    elif call_level(marker, call_text):
        more = f' (tool-ws "," tool-ws tool-call){_MORE_CALLS}' if parallel else ""
        root = f'tool-ws "[" tool-ws tool-call{more} tool-ws "]"'
    else:  # after Llama's python tag, or a bare object
        root = "tool-ws tool-call" + (f" (tool-ws tool-call){_MORE_CALLS}" if parallel and not marker else "")
    return f"root ::= {root}\ntool-ws ::= [ \\t\\n]{{0,20}}\n{rules}"


def trigger_grammars(call_gbnf: str, parallel: bool) -> frozenset[str]:
    """Every grammar `trigger_grammar` can make of `call_gbnf` (a few: they differ in their root
    rule only), so that each is read before decoding, not on the inference thread as a call begins.
    A call begins after one of `MARKERS` or none, and the call's text counts only for whether it
    opens a list."""
    return frozenset(trigger_grammar(call_gbnf, m, text, parallel) for m in ("", *MARKERS) for text in ("{", "["))


def call_level(marker: str, call_text: str) -> int:
    """The JSON nesting level of each call in the text after `marker`: 1 inside a list of calls
    (Mistral's, or a bare list), else 0 (one object per call, between tags or alone)."""
    return int(marker != "<tool_call>" and (marker == "[TOOL_CALLS]" or call_text.lstrip().startswith("[")))


def detected_calls(
    events: Iterable[GenerationEvent | None],
    checks: Mapping[str, Validator],
    new_id: Callable[[], str],
    *,
    parallel: bool = True,
    held: Callable[[], bool] = lambda: False,
) -> Iterator[GenerationEvent | None]:
    """One choice's decoded events with the calls in its text turned into tool-call events.

    A call is sent whole once it is complete and checked, since until then it may turn out to be
    no call; but where decoding holds a begun call to its grammar, with room to finish it (`held`
    says so once the call has begun), the rest of the output is calls, and they stream as they are
    decoded (`held_calls.HeldCalls`). Logprobs stay with text; those of tokens that became calls
    are dropped. Without `parallel` only the first call is sent. A call that repeats an earlier
    one (same tool, same arguments) is not sent again, nor any after it: the engine ends the
    output there, as for forced calls. A choice that made calls and ended on its own ends with
    reason "tool_calls".
    """
    detector = CallDetector(checks)
    calls = 0
    logprobs: list[TokenLogprob] = []
    repeats = Repeats()
    stream: HeldCalls | None = None

    def send(outputs: list[Output], index: int) -> Iterator[GenerationEvent]:
        nonlocal calls
        for output in outputs:
            if isinstance(output, str):
                yield TextDelta(output, index=index, logprobs=tuple(logprobs))
                logprobs.clear()
                continue
            if not repeats.past_end(output.name, output.arguments) and (parallel or not calls):
                yield ToolCallStart(new_id(), output.name, index=index, call_index=calls)
                yield ToolCallDelta(output.arguments, index=index, call_index=calls)
                yield ToolCallEnd(index=index, call_index=calls)
                calls += 1
            logprobs.clear()

    for event in events:
        if isinstance(event, TextDelta) and stream is not None:
            yield from stream.feed(event.text, event.index)
        elif isinstance(event, TextDelta):
            logprobs.extend(event.logprobs)
            yield from send(detector.feed(event.text), event.index)
            if detector.in_call and held():
                marker, text = detector.marker or "", detector.call_text
                level = call_level(marker, text)
                stream = HeldCalls(marker, level, checks, new_id, parallel=parallel, repeats=repeats, first=calls)
                yield from stream.feed(text, event.index)
                logprobs.clear()
        elif isinstance(event, Finish) and stream is not None:
            yield from stream.finish(event)
        elif isinstance(event, Finish):
            yield from send(detector.finish(), event.index)
            if logprobs and not calls:
                yield TextDelta("", index=event.index, logprobs=tuple(logprobs))
            yield replace(event, reason="tool_calls", stop_sequence=None) if calls and event.reason == "stop" else event
        else:
            yield event
