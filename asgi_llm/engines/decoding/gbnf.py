"""GBNF grammars read in Python, to know how far a text is from the end of its grammar. Pure.

llama.cpp's grammar sampler says which tokens may come next, but not how soon the output can
end. To close an output before its token budget runs out, the engine needs the shortest way
from here to a complete output: `Grammar` parses the GBNF text we generate into rules of
single-character steps, and knows for every rule the shortest text it derives. `Position`
(in `recognizer`) follows a text through it.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CharSet", "Grammar", "GrammarError", "parse"]

_NAME = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "[": "[", "]": "]", "/": "/", "-": "-"}
_PREFERRED = " a0"  # a character a class is spelled with in the shortest text, where it allows one


class GrammarError(ValueError):
    """A grammar text this reader does not understand."""


@dataclass(frozen=True)
class CharSet:
    """One character step: a character in `ranges` (inclusive code points), or outside them if `negated`."""

    ranges: tuple[tuple[int, int], ...]
    negated: bool = False

    def __contains__(self, ch: str) -> bool:
        code = ord(ch)
        return any(lo <= code <= hi for lo, hi in self.ranges) != self.negated

    def sample(self) -> str:
        """A character of the set, plain ASCII where it can be."""
        for ch in _PREFERRED:
            if ch in self:
                return ch
        for code in range(0x21, 0x7F):
            if chr(code) in self:
                return chr(code)
        if not self.negated and self.ranges:
            return chr(self.ranges[0][0])
        raise GrammarError("a character class admits no character")


Element = CharSet | str  # a character step, or a rule's name
Alternative = tuple[Element, ...]


class Grammar:
    """Rules of alternatives of steps; `shortest[rule]` is the shortest text a rule derives, and
    `rest[rule][alt][pos]` the length of the shortest text from step `pos` of an alternative on."""

    def __init__(self, rules: dict[str, list[Alternative]], root: str = "root") -> None:
        if root not in rules:
            raise GrammarError(f"the grammar has no rule '{root}'")
        missing = {e for alts in rules.values() for alt in alts for e in alt if isinstance(e, str) and e not in rules}
        if missing:
            raise GrammarError(f"undefined rules: {sorted(missing)}")
        self.rules = rules
        self.root = root
        self.shortest = _shortest(rules)
        self.rest = {name: [_rests(alt, self.shortest) for alt in alts] for name, alts in rules.items()}

    def spell(self, element: Element) -> str:
        return element.sample() if isinstance(element, CharSet) else self.shortest[element]

    def tail(self, rule: str, alt: int, pos: int) -> str:
        """The shortest text from step `pos` of an alternative to its end."""
        return "".join(self.spell(e) for e in self.rules[rule][alt][pos:])


def _rests(alt: Alternative, shortest: dict[str, str]) -> tuple[int, ...]:
    lengths = [1 if isinstance(e, CharSet) else len(shortest[e]) for e in alt]
    return tuple(sum(lengths[i:]) for i in range(len(alt) + 1))


def _shortest(rules: dict[str, list[Alternative]]) -> dict[str, str]:
    """Each rule's shortest text, by rounds until none gets shorter (a rule reached only through
    itself never gets one, and is refused)."""
    best: dict[str, str] = {}
    changed = True
    while changed:
        changed = False
        for name, alts in rules.items():
            for alt in alts:
                if all(isinstance(e, CharSet) or e in best for e in alt):
                    text = "".join(e.sample() if isinstance(e, CharSet) else best[e] for e in alt)
                    if name not in best or len(text) < len(best[name]):
                        best[name] = text
                        changed = True
    endless = sorted(set(rules) - best.keys())
    if endless:
        raise GrammarError(f"rules that never end: {endless}")
    return best


def parse(text: str, root: str = "root") -> Grammar:
    """The grammar in `text` (llama.cpp's GBNF): groups and repetitions become rules of their own."""
    return _Parser(text).grammar(root)


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.i = 0
        self.rules: dict[str, list[Alternative]] = {}
        self.made = 0

    def grammar(self, root: str) -> Grammar:
        self.space(newlines=True)
        while self.i < len(self.text):
            name = self.name()
            self.space()
            if not self.text.startswith("::=", self.i):
                raise GrammarError(f"expected '::=' at {self.i}")
            self.i += 3
            self.space(newlines=True)
            if name in self.rules:
                raise GrammarError(f"rule '{name}' is defined twice")
            self.rules[name] = self.alternatives(nested=False)
            self.space(newlines=True)
        return Grammar(self.rules, root)

    def new_rule(self, alts: list[Alternative]) -> str:
        self.made += 1
        name = f"_{self.made}"
        self.rules[name] = alts
        return name

    def space(self, newlines: bool = False) -> None:
        while self.i < len(self.text):
            ch = self.text[self.i]
            if ch == "#":
                while self.i < len(self.text) and self.text[self.i] != "\n":
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
            raise GrammarError(f"expected a rule name at {start}")
        return self.text[start : self.i]

    def alternatives(self, nested: bool) -> list[Alternative]:
        alts = [self.sequence(nested)]
        while self.i < len(self.text) and self.text[self.i] == "|":
            self.i += 1
            self.space(newlines=nested)
            alts.append(self.sequence(nested))
        return alts

    def sequence(self, nested: bool) -> Alternative:
        steps: list[Element] = []
        while self.i < len(self.text):
            ch = self.text[self.i]
            if ch in "|)" or (ch in "\r\n" and not nested):
                break
            last = len(steps)
            if ch == '"':
                self.i += 1
                while self.text[self.i] != '"':
                    code = self.char()
                    steps.append(CharSet(((code, code),)))
                self.i += 1
            elif ch == "[":
                steps.append(self.char_class())
            elif ch == "(":
                self.i += 1
                self.space(newlines=True)
                steps.append(self.new_rule(self.alternatives(nested=True)))
                if self.text[self.i] != ")":
                    raise GrammarError(f"expected ')' at {self.i}")
                self.i += 1
            elif ch == ".":
                self.i += 1
                steps.append(CharSet((), negated=True))
            elif ch in _NAME:
                steps.append(self.name())
            else:
                raise GrammarError(f"unexpected {ch!r} at {self.i}")
            self.space(newlines=nested)
            while self.i < len(self.text) and self.text[self.i] in "*+?{":
                steps[last:] = [self.repeat(tuple(steps[last:]))]
                self.space(newlines=nested)
        return tuple(steps)

    def char(self) -> int:
        ch = self.text[self.i]
        self.i += 1
        if ch != "\\":
            return ord(ch)
        kind = self.text[self.i]
        self.i += 1
        size = {"x": 2, "u": 4, "U": 8}.get(kind)
        if size is not None:
            code = int(self.text[self.i : self.i + size], 16)
            self.i += size
            return code
        if kind not in _ESCAPES:
            raise GrammarError(f"unknown escape '\\{kind}'")
        return ord(_ESCAPES[kind])

    def char_class(self) -> CharSet:
        self.i += 1
        negated = self.text[self.i] == "^"
        self.i += negated
        ranges = []
        while self.text[self.i] != "]":
            lo = self.char()
            hi = lo
            if self.text[self.i] == "-" and self.text[self.i + 1] != "]":
                self.i += 1
                hi = self.char()
            ranges.append((lo, hi))
        self.i += 1
        return CharSet(tuple(ranges), negated)

    def repeat(self, body: Alternative) -> str:
        """`body` repeated: `?`, `*`, `+` or `{m}`, `{m,}`, `{m,n}`, `{,n}`, as a rule of its own."""
        op = self.text[self.i]
        self.i += 1
        least, most = {"*": (0, None), "+": (1, None), "?": (0, 1)}.get(op, (0, 0))
        if op == "{":
            end = self.text.index("}", self.i)
            bounds = self.text[self.i : end].replace(" ", "").split(",")
            self.i = end + 1
            least = int(bounds[0] or 0)
            most = (int(bounds[1]) if bounds[1] else None) if len(bounds) > 1 else least
        if most is None:
            star = self.new_rule([])
            self.rules[star] = [(*body, star), ()]
            return self.new_rule([body * least + (star,)])
        optional: str | None = None
        for _ in range(most - least):  # (body (body (...)?)?)?
            optional = self.new_rule([body + ((optional,) if optional else ()), ()])
        return self.new_rule([body * least + ((optional,) if optional else ())])
