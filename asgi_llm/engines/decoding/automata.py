"""Deterministic automata over characters, and the GBNF rules that spell them. Pure.

Patterns, formats and number ranges all become a `Dfa`: deterministic, so the grammar built
from it is unambiguous (one parse stack, in llama.cpp's sampler and in our closing watch),
and closed under the products that combine keywords (a pattern with a length limit, a range
with `multipleOf`, two patterns on one key). States that cannot reach an end are pruned, so
every rule of the grammar can finish, which the closing watch relies on.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Collection, Hashable
from dataclasses import dataclass
from typing import TypeVar

from .pattern import ANY, Node, PatternError, Ranges, complement, normalize, parse_pattern

__all__ = ["Dfa", "compile_pattern", "gbnf_rules", "intersect", "literals", "negated", "with_length", "with_residue"]

MAX_STATES = 3000
Edge = tuple[Ranges, int]
Pair = tuple[int, int]  # a state of a product: of two automata, or of an automaton and a count
Settled = tuple[bool, frozenset[int]]  # a pattern's state: whether nothing is read yet, and its NFA states
S = TypeVar("S", bound=Hashable)  # a state of an automaton being determinised


@dataclass(frozen=True)
class Dfa:
    """State 0 starts; `edges[s]` are disjoint (ranges, target) pairs; `accept` the states that may end."""

    edges: tuple[tuple[Edge, ...], ...]
    accept: frozenset[int]

    @property
    def empty(self) -> bool:
        return not self.edges

    def accepts(self, text: str) -> bool:
        state = 0
        for ch in text:
            if self.empty:
                return False
            code = ord(ch)
            state = next((t for ranges, t in self.edges[state] if any(lo <= code <= hi for lo, hi in ranges)), -1)
            if state < 0:
                return False
        return not self.empty and state in self.accept


def _intersect_ranges(a: Ranges, b: Ranges) -> Ranges:
    out = []
    for lo, hi in a:
        for c, d in b:
            if max(lo, c) <= min(hi, d):
                out.append((max(lo, c), min(hi, d)))
    return normalize(out)


class _Nfa:
    """Thompson's construction: `moves[s]` are (ranges, target), `free[s]` the epsilon targets and
    `anchored[s]` the (anchor, target) ones, taken only where the anchor holds ("bol": at the
    string's start, "eol": at its end)."""

    def __init__(self) -> None:
        self.moves: list[list[Edge]] = []
        self.free: list[list[int]] = []
        self.anchored: list[list[tuple[str, int]]] = []

    def state(self) -> int:
        if len(self.moves) >= MAX_STATES * 4:
            raise PatternError("the pattern unrolls into too large an automaton")
        self.moves.append([])
        self.free.append([])
        self.anchored.append([])
        return len(self.moves) - 1

    def anywhere(self, start: int) -> int:
        """Adds any text from `start` (an unanchored end); returns its end state, which loops."""
        return self.build(("rep", ("set", ANY), 0, None), start)

    def build(self, node: Node, start: int) -> int:
        """Adds `node` from `start`; returns its end state."""
        kind = node[0]
        if kind in ("bol", "eol"):
            end = self.state()
            self.anchored[start].append((kind, end))
            return end
        if kind == "set":
            end = self.state()
            ranges = _intersect_ranges(node[1], ANY)
            if ranges:
                self.moves[start].append((ranges, end))
            return end
        if kind == "cat":
            for item in node[1]:
                start = self.build(item, start)
            return start
        if kind == "alt":
            end = self.state()
            for item in node[1]:
                branch = self.state()
                self.free[start].append(branch)
                self.free[self.build(item, branch)].append(end)
            return end
        _, body, least, most = node
        for _ in range(least):
            start = self.build(body, start)
        if most is None:
            loop = self.state()
            self.free[start].append(loop)
            self.free[self.build(body, loop)].append(loop)
            return loop
        end = self.state()
        for _ in range(most - least):
            self.free[start].append(end)
            start = self.build(body, start)
        self.free[start].append(end)
        return end

    def closure(self, states: Collection[int], anchors: tuple[str, ...] = ()) -> frozenset[int]:
        """The states reached from `states` without a character, where `anchors` hold."""
        seen, todo = set(states), list(states)
        while todo:
            state = todo.pop()
            for nxt in self.free[state] + [t for kind, t in self.anchored[state] if kind in anchors]:
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return frozenset(seen)


def _split(edges: list[Edge]) -> list[tuple[tuple[int, int], set[int]]]:
    """Overlapping (ranges, target) edges as disjoint intervals, each with every target it reaches."""
    points = sorted({p for ranges, _ in edges for lo, hi in ranges for p in (lo, hi + 1)})
    out = []
    for lo, nxt in itertools.pairwise(points):
        targets = {t for ranges, t in edges if any(a <= lo and nxt - 1 <= b for a, b in ranges)}
        if targets:
            out.append(((lo, nxt - 1), targets))
    return out


def _determinize(start: S, step: Callable[[S], list[tuple[Ranges, S]]], final: Callable[[S], bool]) -> Dfa:
    """The automaton reached from `start`, a state at a time: `step` gives a state's edges."""
    index: dict[S, int] = {start: 0}
    order: list[S] = [start]
    edges: list[tuple[Edge, ...]] = []
    while len(edges) < len(order):
        state = order[len(edges)]
        grouped: dict[int, list[tuple[int, int]]] = {}
        for ranges, target in step(state):
            if target not in index:
                if len(order) >= MAX_STATES:
                    raise PatternError("the pattern needs too large an automaton")
                index[target] = len(order)
                order.append(target)
            grouped.setdefault(index[target], []).extend(ranges)
        edges.append(tuple((normalize(r), t) for t, r in grouped.items()))
    return _prune(Dfa(tuple(edges), frozenset(i for i, s in enumerate(order) if final(s))))


def _prune(dfa: Dfa) -> Dfa:
    """Only the states from which an end can be reached, renumbered from the start."""
    live = set(dfa.accept)
    changed = True
    while changed:
        changed = False
        for s, edges in enumerate(dfa.edges):
            if s not in live and any(t in live for _, t in edges):
                live.add(s)
                changed = True
    if 0 not in live:
        return Dfa((), frozenset())
    order, index = [0], {0: 0}
    for s in order:
        for _, t in dfa.edges[s]:
            if t in live and t not in index:
                index[t] = len(order)
                order.append(t)
    kept = tuple(tuple((r, index[t]) for r, t in dfa.edges[s] if t in live) for s in order)
    return Dfa(kept, frozenset(index[s] for s in order if s in dfa.accept))


def compile_pattern(pattern: str | Node) -> Dfa:
    """The automaton of a pattern, matched as `re.search` does: anywhere, `^` and `$` holding only
    at the string's ends (its characters are never "\\n", so `$` never holds before one). A tree
    already read (as numbers build) is matched whole."""
    nfa = _Nfa()
    start = nfa.state()
    if isinstance(pattern, str):
        end = nfa.anywhere(nfa.build(parse_pattern(pattern), nfa.anywhere(start)))
        matched: frozenset[int] | None = frozenset({end})  # a match found: any text may follow
    else:
        end, matched = nfa.build(pattern, start), None

    def settle(at_start: bool, states: frozenset[int]) -> tuple[bool, frozenset[int]]:
        return (False, matched) if matched is not None and end in states else (at_start, states)

    def step(state: Settled) -> list[tuple[Ranges, Settled]]:  # (at the start, NFA states)
        moves = [edge for s in state[1] for edge in nfa.moves[s]]
        return [((span,), settle(False, nfa.closure(targets))) for span, targets in _split(moves)]

    def final(state: Settled) -> bool:
        return end in nfa.closure(state[1], ("bol", "eol") if state[0] else ("eol",))

    return _determinize(settle(True, nfa.closure({start}, ("bol",))), step, final)


def _product(a: Dfa, b: Dfa) -> Dfa:
    def step(state: Pair) -> list[tuple[Ranges, Pair]]:  # (state of a, state of b)
        p, q = state
        out: list[tuple[Ranges, Pair]] = []
        for ra, ta in a.edges[p]:
            for rb, tb in b.edges[q]:
                both = _intersect_ranges(ra, rb)
                if both:
                    out.append((both, (ta, tb)))
        return out

    return _determinize((0, 0), step, lambda s: s[0] in a.accept and s[1] in b.accept)


def intersect(a: Dfa, b: Dfa) -> Dfa:
    """Strings both accept."""
    return a if a.empty else _product(a, b) if not b.empty else b


def negated(dfa: Dfa) -> Dfa:
    """The strings (of characters a pattern may hold) that `dfa` does not accept."""

    def step(state: int | None) -> list[tuple[Ranges, int | None]]:  # a state of `dfa`, or None: left it for good
        edges = list(dfa.edges[state]) if state is not None else []
        rest = complement(normalize([r for ranges, _ in edges for r in ranges]), ANY)
        return [*edges, *([(rest, None)] if rest else [])]

    return _determinize(None if dfa.empty else 0, step, lambda s: s is None or s not in dfa.accept)


def literals(texts: Collection[str]) -> Dfa:
    """Exactly the strings `texts`."""
    return compile_pattern(("alt", [("cat", [("set", ((ord(c), ord(c)),)) for c in text]) for text in texts]))


def with_length(dfa: Dfa, least: int, most: int | None) -> Dfa:
    """Strings of `dfa` with `least` to `most` characters."""
    cap = most if most is not None else least
    if dfa.empty:
        return dfa

    def step(state: Pair) -> list[tuple[Ranges, Pair]]:  # (state, characters so far)
        s, n = state
        if most is not None and n >= most:
            return []
        return [(r, (t, min(n + 1, cap))) for r, t in dfa.edges[s]]

    return _determinize((0, 0), step, lambda s: s[0] in dfa.accept and s[1] >= least)


def with_residue(dfa: Dfa, divisor: int) -> Dfa:
    """Integers of `dfa` (its strings are decimal integers, a sign allowed) that `divisor` divides."""
    digits = tuple((d, d) for d in range(0x30, 0x3A))

    def step(state: Pair) -> list[tuple[Ranges, Pair]]:  # (state, value modulo divisor)
        s, rest = state
        out: list[tuple[Ranges, Pair]] = []
        for ranges, t in dfa.edges[s]:
            others = _intersect_ranges(ranges, ((0, 0x2F), (0x3A, 0x10FFFF)))
            if others:
                out.append((others, (t, rest)))
            for span in _intersect_ranges(ranges, digits):
                for code in range(span[0], span[1] + 1):
                    out.append((((code, code),), (t, (rest * 10 + code - 0x30) % divisor)))
        return out

    return _determinize((0, 0), step, lambda s: s[0] in dfa.accept and s[1] == 0)


_ESCAPED = {0x22: '"\\\\\\""', 0x5C: '"\\\\\\\\"'}  # `"` and `\` inside a JSON string: \" and \\


def _char(code: int) -> str:
    if chr(code).isascii() and chr(code).isalnum():
        return chr(code)
    return f"\\x{code:02X}" if code < 0x100 else f"\\u{code:04X}" if code < 0x10000 else f"\\U{code:08X}"


def _class(ranges: Ranges) -> str:
    return "[" + "".join(_char(lo) if lo == hi else f"{_char(lo)}-{_char(hi)}" for lo, hi in ranges) + "]"


def gbnf_rules(dfa: Dfa, name: str, *, in_string: bool) -> str:
    """GBNF for `dfa`, its start rule called `name`. `in_string`: the characters are a JSON string's
    content, so a quote or backslash is written escaped."""
    if dfa.empty:
        raise PatternError("no string is allowed")
    rule = [name] + [f"{name}-{s}" for s in range(1, len(dfa.edges))]
    bare = {s for s, edges in enumerate(dfa.edges) if not edges}  # ends with nothing after: not a rule
    lines = []
    for s, edges in enumerate(dfa.edges):
        if s in bare and s:
            continue
        alts = ['""'] if s in dfa.accept and edges else []
        for ranges, t in edges:
            after = "" if t in bare else f" {rule[t]}"
            plain = ranges
            if in_string:
                for code, text in _ESCAPED.items():
                    if any(lo <= code <= hi for lo, hi in ranges):
                        alts.append(text + after)
                plain = normalize([r for lo, hi in ranges for r in _without(lo, hi, tuple(_ESCAPED))])
            if plain:
                alts.append(_class(plain) + after)
        lines.append(f"{rule[s]} ::= " + (" | ".join(alts) if alts else '""'))
    return "\n".join(lines)


def _without(lo: int, hi: int, codes: tuple[int, ...]) -> list[tuple[int, int]]:
    out, start = [], lo
    for code in sorted(codes):
        if start <= code <= hi:
            if code > start:
                out.append((start, code - 1))
            start = code + 1
    if start <= hi:
        out.append((start, hi))
    return out
