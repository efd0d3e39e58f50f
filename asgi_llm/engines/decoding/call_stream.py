"""A forced call's JSON text read as it is decoded: each call's name, its arguments' text piece
by piece, and the call's whole text once its object closes. Pure.

The calls are objects at one nesting `level` (0: the text is one call; 1: an array of them),
written `{"name": ..., "arguments": {...}}`, name first (the grammar's order). The arguments'
pieces are the model's own text of the value, whitespace and all, so they concatenate to exactly
the `arguments` string the call reports.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

__all__ = ["CallBegun", "CallDone", "CallScan", "CallScanner", "CallText"]


@dataclass(frozen=True)
class CallBegun:
    """The call's arguments value has begun; its name is known."""

    name: str


@dataclass(frozen=True)
class CallText:
    """More of the call's arguments text."""

    text: str


@dataclass(frozen=True)
class CallDone:
    """The call's object is closed: `text` is its whole JSON, `arguments` its arguments' text."""

    text: str
    arguments: str


CallScan = CallBegun | CallText | CallDone


@dataclass
class _Call:
    """One call being read: its text so far, the key being written, its name, its arguments."""

    text: list[str] = field(default_factory=list)
    key: str | None = None
    expect_key: bool = True
    string: list[str] | None = None  # a key or the name, while it is written
    name: str | None = None
    arguments: list[str] | None = None  # the arguments' text, once the value has begun
    arguments_closed: bool = False


class CallScanner:
    """Feeds decoded text, piece by piece, and tells what each piece did to the calls at `level`."""

    def __init__(self, level: int, keys: tuple[str, ...] = ("arguments",)) -> None:
        self._level = level
        self._keys = keys
        self._depth = 0
        self._in_string = False
        self._escaped = False
        self._call: _Call | None = None

    def feed(self, text: str) -> list[CallScan]:
        out: list[CallScan] = []
        for ch in text:
            self._char(ch, out)
        return _merged(out)

    def _char(self, ch: str, out: list[CallScan]) -> None:
        call = self._call
        if call is not None:
            call.text.append(ch)
            if call.arguments is not None and not call.arguments_closed:
                call.arguments.append(ch)
                out.append(CallText(ch))
        if self._in_string:
            self._string_char(ch, call)
            return
        top = self._level + 1  # the depth of a call object's own keys and values
        if ch == '"':
            self._in_string = True
            if call is not None and self._depth == top and (call.expect_key or call.key == "name"):
                call.string = []
        elif ch in "{[":
            if self._depth == self._level and ch == "{":
                self._call = _Call(text=[ch])
            elif call is not None and self._depth == top and call.key in self._keys and call.arguments is None:
                call.arguments = [ch]
                out += [CallBegun(call.name or ""), CallText(ch)]
            self._depth += 1
        elif ch in "}]":
            self._depth -= 1
            if call is not None and self._depth == top and call.arguments is not None:
                call.arguments_closed = True
            if call is not None and self._depth == self._level:
                out.append(CallDone("".join(call.text), "".join(call.arguments or ())))
                self._call = None
        elif call is not None and self._depth == top and ch in ":,":
            call.expect_key = ch == ","

    def _string_char(self, ch: str, call: _Call | None) -> None:
        if self._escaped:
            self._escaped = False
        elif ch == "\\":
            self._escaped = True
        elif ch == '"':
            self._in_string = False
        if call is None or call.string is None:
            return
        if self._in_string:
            call.string.append(ch)
            return
        value = json.loads('"' + "".join(call.string) + '"')
        call.string = None
        if call.expect_key:
            call.key = value
        else:
            call.name = value


def _merged(scans: list[CallScan]) -> list[CallScan]:
    """Adjacent pieces of arguments text joined into one."""
    out: list[CallScan] = []
    for scan in scans:
        last = out[-1] if out else None
        if isinstance(scan, CallText) and isinstance(last, CallText):
            out[-1] = CallText(last.text + scan.text)
        else:
            out.append(scan)
    return out
