"""JSON Schema `pattern`s read as regular expressions over the characters of a JSON string. Pure.

The subset of ECMAScript that a grammar can hold exactly: anchors (anywhere: `automata`
reads `^` and `$` as holding only at the string's ends), classes, escapes, `.`, groups
(capturing, named, `(?:`), alternation and quantifiers with bounds. What is not a regular
language, or reads differently in Python's `re` (which jsonschema validates with), is refused:
lookarounds, back-references, word boundaries, `\\p{...}`.
Sets are tuples of inclusive code point ranges. Control characters never occur (a JSON string
would need them escaped, and none of the formats want them); where Python's `\\D`, `\\W`, `\\S`
or a class negating a shorthand would also exclude non-ASCII digits, letters or spaces, the
complement is taken within ASCII, so every string the grammar allows matches in Python too.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ANY", "Node", "PatternError", "Ranges", "complement", "parse_pattern"]

Ranges = tuple[tuple[int, int], ...]
Node = tuple[Any, ...]  # ("set", ranges), ("cat" | "alt", [nodes]), ("rep", node, least, most), ("bol" | "eol", [])


class PatternError(ValueError):
    """A pattern outside the subset a grammar can hold."""


def normalize(ranges: list[tuple[int, int]]) -> Ranges:
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return tuple(out)


def complement(ranges: Ranges, universe: Ranges) -> Ranges:
    out = []
    for lo, hi in universe:
        start = lo
        for a, b in ranges:
            if b < start or a > hi:
                continue
            if a > start:
                out.append((start, a - 1))
            start = max(start, b + 1)
        if start <= hi:
            out.append((start, hi))
    return normalize(out)


ANY: Ranges = ((0x20, 0x7E), (0x80, 0xD7FF), (0xE000, 0x10FFFF))  # no controls, no surrogates
_ASCII: Ranges = ((0x20, 0x7E),)
_DIGIT: Ranges = ((0x30, 0x39),)
_WORD: Ranges = normalize([(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)])
_SPACE: Ranges = ((0x20, 0x20),)
_SHORTHANDS = {"d": _DIGIT, "w": _WORD, "s": _SPACE}
_CONTROL = {"n": 0x0A, "t": 0x09, "r": 0x0D, "f": 0x0C, "v": 0x0B, "0": 0x00}
_REFUSED = {"b": "word boundaries", "B": "word boundaries", "p": "'\\p{...}' classes", "P": "'\\P{...}' classes"}
_SPECIAL = "()[]{}|*+?.^$\\"


def parse_pattern(pattern: str) -> Node:
    """The tree of `pattern`: ("set", ranges), ("cat", nodes), ("alt", nodes), ("rep", node, least,
    most), and ("bol", []) / ("eol", []) for `^` / `$`. It matches anywhere in a string, as
    `re.search` does: `automata.compile_pattern` adds the unanchored ends."""
    reader = _Reader(pattern)
    node = reader.alternation()
    if reader.i < len(pattern):
        raise PatternError(f"unbalanced ')' at {reader.i}")
    return node


class _Reader:
    def __init__(self, text: str) -> None:
        self.text = text
        self.i = 0

    def peek(self, ahead: int = 0) -> str:
        j = self.i + ahead
        return self.text[j] if j < len(self.text) else ""

    def alternation(self) -> Node:
        branches = [self.sequence()]
        while self.peek() == "|":
            self.i += 1
            branches.append(self.sequence())
        return branches[0] if len(branches) == 1 else ("alt", branches)

    def sequence(self) -> Node:
        items: list[Node] = []
        while self.peek() not in ("", "|", ")"):
            atom = self.atom()
            items.append(self.quantified(atom))
        return ("cat", items)

    def atom(self) -> Node:
        ch = self.peek()
        self.i += 1
        if ch == "^":
            return ("bol", [])
        if ch == "$":
            return ("eol", [])
        if ch == ".":
            return ("set", ANY)
        if ch == "[":
            return ("set", self.char_class())
        if ch == "(":
            return self.group()
        if ch == "\\":
            return ("set", self.escape(in_class=False))
        if ch in "*+?":
            raise PatternError(f"nothing to repeat at {self.i - 1}")
        if ch == "{" and self.bounds() is not None:
            raise PatternError(f"nothing to repeat at {self.i - 1}")
        if ch in "])}":
            raise PatternError(f"a lone '{ch}' at {self.i - 1}")
        return ("set", ((ord(ch), ord(ch)),))

    def group(self) -> Node:
        if self.peek() == "?":
            if self.peek(1) == ":":
                self.i += 2
            elif self.peek(1) in ("<", "P") and self.peek(2) not in ("=", "!"):
                end = self.text.find(">", self.i)
                if end < 0:
                    raise PatternError(f"an unfinished group name at {self.i}")
                self.i = end + 1
            else:
                raise PatternError(f"lookarounds and inline flags ('(?') are not regular, at {self.i - 1}")
        node = self.alternation()
        if self.peek() != ")":
            raise PatternError(f"an unclosed '(' before {self.i}")
        self.i += 1
        return node

    def bounds(self) -> tuple[int, int | None] | None:
        """`{m}`, `{m,}` or `{m,n}` after an opening brace already read; None (a literal brace) otherwise."""
        end = self.text.find("}", self.i)
        body = self.text[self.i : end] if end >= 0 else ""
        least, comma, most = body.partition(",")
        if not least.isdigit() or not (most.isdigit() or most == ""):
            return None
        self.i = end + 1
        return int(least), (int(most) if most else None) if comma else int(least)

    def quantified(self, atom: Node) -> Node:
        while True:
            ch = self.peek()
            if ch in ("*", "+", "?"):
                self.i += 1
                least, most = {"*": (0, None), "+": (1, None), "?": (0, 1)}[ch]
            elif ch == "{":
                self.i += 1
                found = self.bounds()
                if found is None:
                    self.i -= 1
                    return atom
                least, most = found
                if most is not None and most < least:
                    raise PatternError(f"a quantifier's bounds are out of order before {self.i}")
            else:
                return atom
            if atom[0] in ("bol", "eol"):  # as Python's `re` and ECMAScript refuse `^*`
                raise PatternError(f"nothing to repeat before {self.i}")
            if self.peek() == "?":  # lazy: the same language
                self.i += 1
            if self.peek() in ("*", "+", "?"):
                raise PatternError(f"a quantifier repeated at {self.i}")
            atom = ("rep", atom, least, most)

    def escape(self, in_class: bool) -> Ranges:
        ch = self.peek()
        if not ch:
            raise PatternError("the pattern ends in a lone backslash")
        self.i += 1
        if ch.lower() in _SHORTHANDS:
            plain = _SHORTHANDS[ch.lower()]
            return plain if ch.islower() else complement(plain, _ASCII)
        if ch in _CONTROL:
            return ((_CONTROL[ch], _CONTROL[ch]),)
        if ch in ("x", "u"):
            size = 2 if ch == "x" else 4
            digits = self.text[self.i : self.i + size]
            if len(digits) != size or any(c not in "0123456789abcdefABCDEF" for c in digits):
                raise PatternError(f"a bad '\\{ch}' escape at {self.i - 2}")
            self.i += size
            code = int(digits, 16)
            return ((code, code),)
        if ch in _REFUSED and not (in_class and ch == "b"):
            raise PatternError(f"{_REFUSED[ch]} are not supported")
        if ch.isdigit() or ch in "kc":
            raise PatternError(f"'\\{ch}' (back-references, control escapes) is not supported")
        if in_class and ch == "b":
            return ((0x08, 0x08),)
        if ch.isalnum():
            raise PatternError(f"the unknown escape '\\{ch}'")
        return ((ord(ch), ord(ch)),)

    def char_class(self) -> Ranges:
        negated = self.peek() == "^"
        self.i += negated
        if self.peek() == "]":
            raise PatternError(f"an empty class at {self.i}")
        ranges: list[tuple[int, int]] = []
        ascii_only = False
        while self.peek() != "]":
            if not self.peek():
                raise PatternError("an unclosed '['")
            shorthand = self.peek() == "\\" and self.peek(1).lower() in _SHORTHANDS
            ascii_only |= shorthand and (negated or self.peek(1).isupper())
            lo = self.member()
            if self.peek() == "-" and self.peek(1) not in ("]", "") and len(lo) == 1 and lo[0][0] == lo[0][1]:
                self.i += 1
                hi = self.member()
                if len(hi) != 1 or hi[0][0] != hi[0][1] or hi[0][0] < lo[0][0]:
                    raise PatternError(f"a bad range in a class before {self.i}")
                ranges.append((lo[0][0], hi[0][0]))
            else:
                ranges.extend(lo)
        self.i += 1
        members = normalize(ranges)
        if negated:
            return complement(members, _ASCII if ascii_only else ANY)
        return members

    def member(self) -> Ranges:
        ch = self.peek()
        self.i += 1
        if ch == "\\":
            return self.escape(in_class=True)
        return ((ord(ch), ord(ch)),)
