"""GBNF grammars read in Python, to know how far a text is from the end of its grammar. Pure.

llama.cpp's grammar sampler says which tokens may come next, but not how soon the output can
end. To close an output before its token budget runs out, the engine needs the shortest way
from here to a complete output: `Grammar` parses the GBNF text we generate into rules of
single-character steps, and knows for every rule the shortest text it derives. `Position`
(in `recognizer`) follows a text through it.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from functools import cached_property

__all__ = ["CharSet", "Grammar", "GrammarError", "parse"]

_NAME = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-")  # no `_`: llama.cpp has none
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "[": "[", "]": "]", "-": "-"}
_PREFERRED = " a0"  # a character a class is spelled with in the shortest text, where it allows one


class GrammarError(ValueError):
    """A grammar text this reader does not understand; `at` is where in the text, if known."""

    def __init__(self, message: str, at: int | None = None) -> None:
        super().__init__(message)
        self.at = at


@dataclass(frozen=True)
class CharSet:
    """One character step: a character in `ranges` (inclusive code points), or outside them if `negated`."""

    ranges: tuple[tuple[int, int], ...]
    negated: bool = False

    def __contains__(self, ch: str) -> bool:
        code = ord(ch)
        return any(lo <= code <= hi for lo, hi in self.ranges) != self.negated

    def sample(self) -> str:
        """A character of the set, plain ASCII where it can be (computed once: shortest texts ask often)."""
        return self._sample

    @cached_property
    def _sample(self) -> str:
        for ch in _PREFERRED:
            if ch in self:
                return ch
        if not self.negated:
            printable = [max(lo, 0x21) for lo, hi in self.ranges if max(lo, 0x21) <= min(hi, 0x7E)]
            if printable or self.ranges:
                return chr(min(printable) if printable else self.ranges[0][0])
        for code in range(0x21, 0x7F):
            if chr(code) in self:
                return chr(code)
        raise GrammarError("a character class admits no character")


Element = CharSet | str  # a character step, or a rule's name
Alternative = tuple[Element, ...]


class Grammar:
    """Rules of alternatives of steps; `shortest[rule]` is the shortest text a rule derives, and
    `rest[rule][alt][pos]` the length of the shortest text from step `pos` of an alternative on;
    `depth` the most rules entered one inside another before a character is read."""

    def __init__(self, rules: dict[str, list[Alternative]], root: str = "root") -> None:
        if root not in rules:
            raise GrammarError(f"the grammar has no rule '{root}'")
        missing = {e for alts in rules.values() for alt in alts for e in alt if isinstance(e, str) and e not in rules}
        if missing:
            raise GrammarError(f"undefined rules: {sorted(missing)}")
        self.rules = rules
        self.root = root
        self.shortest = _shortest(rules)
        looping, self.depth = _left_chains(rules, self.shortest)
        if looping is not None:
            raise GrammarError(f"rule '{looping}' is left-recursive (it can reach itself before any character)")
        self.rest = {name: [_rests(alt, self.shortest) for alt in alts] for name, alts in rules.items()}

    def spell(self, element: Element) -> str:
        return element.sample() if isinstance(element, CharSet) else self.shortest[element]

    def tail(self, rule: str, alt: int, pos: int) -> str:
        """The shortest text from step `pos` of an alternative to its end."""
        return "".join(self.spell(e) for e in self.rules[rule][alt][pos:])


def _rests(alt: Alternative, shortest: dict[str, str]) -> tuple[int, ...]:
    rests = [0]
    for e in reversed(alt):
        rests.append(rests[-1] + (1 if isinstance(e, CharSet) else len(shortest[e])))
    return tuple(reversed(rests))


def _left_chains(rules: dict[str, list[Alternative]], shortest: dict[str, str]) -> tuple[str | None, int]:
    """A rule that can reach itself without reading a character (llama.cpp refuses it), if any;
    and the most rules entered one inside another before a character is read."""
    firsts: dict[str, set[str]] = {}
    for name, alts in rules.items():
        firsts[name] = set()
        for alt in alts:
            for e in alt:
                if isinstance(e, CharSet):
                    break
                firsts[name].add(e)
                if shortest[e]:
                    break
    depth: dict[str, int] = {}  # rules done, and the longest chain from each
    walking: set[str] = set()
    for top in rules:
        if top in depth:
            continue
        walk = [(top, iter(sorted(firsts[top])))]
        walking.add(top)
        while walk:
            name, nexts = walk[-1]
            step = next(nexts, None)
            if step is None:
                depth[name] = 1 + max((depth[f] for f in firsts[name]), default=0)
                walking.discard(name)
                walk.pop()
            elif step in walking:
                return step, 0
            elif step not in depth:
                walking.add(step)
                walk.append((step, iter(sorted(firsts[step]))))
    return None, max(depth.values(), default=0)


def _shortest(rules: dict[str, list[Alternative]]) -> dict[str, str]:
    """Each rule's shortest text (a rule reached only through itself never gets one, and is
    refused). Knuth's generalisation of Dijkstra: rules are settled shortest first, and an
    alternative is weighed once every rule in it is settled, so the time stays near linear in
    the grammar's size, whatever order its rules are written in."""
    uses: dict[str, list[int]] = {name: [] for name in rules}
    owners: list[tuple[str, Alternative]] = []
    waiting: list[int] = []
    length: list[int] = []
    queue: list[tuple[int, int]] = []
    for name, alts in rules.items():
        for alt in alts:
            refs = [e for e in alt if isinstance(e, str)]
            for ref in refs:
                uses[ref].append(len(owners))
            if not refs:
                heapq.heappush(queue, (len(alt), len(owners)))
            owners.append((name, alt))
            waiting.append(len(refs))
            length.append(len(alt) - len(refs))
    best: dict[str, str] = {}
    while queue:
        size, index = heapq.heappop(queue)
        name, alt = owners[index]
        if name in best:
            continue
        best[name] = "".join(e.sample() if isinstance(e, CharSet) else best[e] for e in alt)
        for user in uses[name]:
            waiting[user] -= 1
            length[user] += size
            if not waiting[user]:
                heapq.heappush(queue, (length[user], user))
    endless = sorted(set(rules) - best.keys())
    if endless:
        raise GrammarError(f"rules that never end: {endless[:10]}")
    return best


def parse(text: str, root: str = "root") -> Grammar:
    """The grammar in `text` (llama.cpp's GBNF): groups and repetitions become rules of their own.

    At least as strict as llama.cpp's own reader (its repetition limits included), so a text
    read here does not fail there; token references (`<[id]>`, `!<...>`) are refused, for
    the output is followed as text.
    """
    try:
        return _Parser(text).grammar(root)
    except IndexError:
        raise GrammarError("unexpected end of the grammar", at=len(text)) from None


_MAX_REPEAT = 2000  # llama.cpp's MAX_REPETITION_THRESHOLD


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.i = 0
        self.rules: dict[str, list[Alternative]] = {}
        self.made = 0
        self.current = ""  # the rule being read
        self.names: set[str] = set()  # with `generated`: llama.cpp's symbol count, for its repetition limit
        self.generated = 0

    def fail(self, message: str, at: int | None = None) -> GrammarError:
        return GrammarError(message, at=self.i if at is None else at)

    def grammar(self, root: str) -> Grammar:
        self.space(newlines=True)
        while self.i < len(self.text):
            start = self.i
            name = self.name()
            self.names.add(name)
            self.space()
            if not self.text.startswith("::=", self.i):
                raise self.fail("expected '::='")
            self.i += 3
            self.space(newlines=True)
            if name in self.rules:
                raise self.fail(f"rule '{name}' is defined twice", at=start)
            self.current = name
            self.rules[name] = self.alternatives(nested=False)
            self.space(newlines=True)
        return Grammar(self.rules, root)

    def new_rule(self, alts: list[Alternative]) -> str:
        """A rule for a group or repetition of the rule being read, named so no rule of the text can clash."""
        self.made += 1
        name = f"{self.current}/{self.made}"
        self.rules[name] = alts
        return name

    def space(self, newlines: bool = False) -> None:
        while self.i < len(self.text):
            ch = self.text[self.i]
            if ch == "#":
                while self.i < len(self.text) and self.text[self.i] not in "\r\n":
                    self.i += 1
            elif ch in " \t" or (newlines and ch in "\r\n"):
                self.i += 1
            else:
                return

    def name(self) -> str:
        start = self.i
        while self.i < len(self.text) and self.text[self.i] in _NAME:
            self.i += 1
        if start == self.i:
            raise self.fail("expected a rule name")
        return self.text[start : self.i]

    def alternatives(self, nested: bool) -> list[Alternative]:
        alts = [self.sequence(nested)]
        while self.i < len(self.text) and self.text[self.i] == "|":
            self.i += 1
            self.space(newlines=True)
            alts.append(self.sequence(nested))
        return alts

    def sequence(self, nested: bool) -> Alternative:
        steps: list[Element] = []
        last, count = 0, 1  # where the last item starts, and the symbols it stands for (llama.cpp's count)
        while self.i < len(self.text):
            ch = self.text[self.i]
            if ch in "*+?{":
                if last == len(steps):
                    raise self.fail(f"nothing before '{ch}' to repeat")
                body, count = self.repeat(tuple(steps[last:]), count, nested)
                steps[last:] = [body]
                continue
            last, count = len(steps), 1
            if ch == '"':
                start = self.i
                self.i += 1
                while self.i < len(self.text) and self.text[self.i] != '"':
                    code = self.char()
                    steps.append(CharSet(((code, code),)))
                if self.i == len(self.text):
                    raise self.fail("the string opened here is not closed", at=start)
                self.i += 1
            elif ch == "[":
                steps.append(self.char_class())
            elif ch == "(":
                group, count = self.group()
                steps.append(group)
            elif ch == ".":
                self.i += 1
                steps.append(CharSet((), negated=True))
            elif ch in _NAME:
                name = self.name()
                self.names.add(name)
                steps.append(name)
            elif ch in "<!":
                raise self.fail("token references (<...>) are not supported here: the output is followed as text")
            else:
                break
            self.space(newlines=nested)
        if self.i < len(self.text) and self.text[self.i] not in "|)\r\n":
            raise self.fail(f"unexpected {self.text[self.i]!r}")
        return tuple(steps)

    def group(self) -> tuple[str, int]:
        """A parenthesised group as a rule, and the symbols llama.cpp makes for it."""
        start = self.i
        self.i += 1
        self.space(newlines=True)
        before = len(self.names) + self.generated
        self.generated += 1
        alts = self.alternatives(nested=True)
        if self.i >= len(self.text) or self.text[self.i] != ")":
            raise self.fail("the group opened here is not closed with ')'", at=start)
        self.i += 1
        return self.new_rule(alts), max(1, len(self.names) + self.generated - before)

    def char(self) -> int:
        start = self.i
        ch = self.text[self.i]
        self.i += 1
        if ch != "\\":
            return ord(ch)
        kind = self.text[self.i]
        self.i += 1
        size = {"x": 2, "u": 4, "U": 8}.get(kind)
        if size is not None:
            digits = self.text[self.i : self.i + size]
            if len(digits) != size or not all(d in "0123456789abcdefABCDEF" for d in digits):
                raise self.fail(f"'\\{kind}' needs {size} hex digits", at=start)
            self.i += size
            code = int(digits, 16)
            if code > 0x10FFFF:
                raise self.fail("a character beyond Unicode", at=start)
            return code
        if kind not in _ESCAPES:
            raise self.fail(f"unknown escape '\\{kind}'", at=start)
        return ord(_ESCAPES[kind])

    def char_class(self) -> CharSet:
        self.i += 1
        negated = self.text[self.i] == "^"
        self.i += negated
        ranges = []
        start = self.i
        while self.text[self.i] != "]":
            if self.text[self.i] in "\r\n":
                raise self.fail("the character class opened here is not closed", at=start - 1 - negated)
            lo = self.char()
            hi = lo
            if self.text[self.i] == "-" and self.text[self.i + 1] != "]":
                self.i += 1
                hi = self.char()
            ranges.append((lo, hi))
        self.i += 1
        return CharSet(tuple(ranges), negated)

    def repeat(self, body: Alternative, count: int, nested: bool) -> tuple[str, int]:
        """`body` repeated: `?`, `*`, `+` or `{m}`, `{m,}`, `{m,n}`, as a rule of its own, and the
        symbols llama.cpp counts for it (it refuses 2000 or more)."""
        start = self.i
        least, most = self.bounds(nested)
        total = most if most else least or 1
        if least > _MAX_REPEAT or (most or 0) > _MAX_REPEAT or count * total >= _MAX_REPEAT:
            raise self.fail(
                f"the repetition makes too many rules (llama.cpp allows fewer than {_MAX_REPEAT})", at=start
            )
        self.generated += 1 if most is None else most - least
        if most is None:
            star = self.new_rule([])
            self.rules[star] = [(*body, star), ()]
            return self.new_rule([body * least + (star,)]), count * total
        optional: str | None = None
        for _ in range(most - least):  # (body (body (...)?)?)?
            optional = self.new_rule([body + ((optional,) if optional else ()), ()])
        return self.new_rule([body * least + ((optional,) if optional else ())]), count * total

    def bounds(self, nested: bool) -> tuple[int, int | None]:
        """The bounds of the repetition operator here (`most` None: no limit), read past it."""
        start, op = self.i, self.text[self.i]
        self.i += 1
        self.space(newlines=nested)
        if op != "{":
            return {"*": (0, None), "+": (1, None), "?": (0, 1)}[op]
        least = self.number(nested)
        most: int | None = least
        if self.text[self.i] == ",":
            self.i += 1
            self.space(newlines=nested)
            most = self.number(nested) if self.text[self.i].isdigit() else None
        if self.text[self.i] != "}":
            raise self.fail("expected '}' to end the repetition")
        self.i += 1
        self.space(newlines=nested)
        if most is not None and most < least:
            raise self.fail(f"the repetition's bounds are reversed: {least} > {most}", at=start)
        return least, most

    def number(self, nested: bool) -> int:
        start = self.i
        while self.i < len(self.text) and self.text[self.i] in "0123456789":
            self.i += 1
        if start == self.i:
            raise self.fail("expected a number")
        value = int(self.text[start : self.i][:12])
        self.space(newlines=nested)
        return value
