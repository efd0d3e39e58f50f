"""Strings and numbers in the schema rewrite: formats, patterns and their negations, lengths,
bounds. Each automaton is built here once per compile (a format used in fifty fields too), so
what cannot be held is a 400 naming the keyword before any token. Pure."""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

from .automata import Dfa, with_length
from .checks import checked_formats
from .formats import FORMATS
from .forms import Number, Plain, Text
from .pattern import PatternError
from .walk import Schema, Walker

__all__ = ["NUMBER_KEYWORDS", "rewrite_number", "rewrite_string"]

NUMBER_KEYWORDS = frozenset(
    {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "x-fractional"}
)
_MAX_DFA_LENGTH = 256  # a pattern or format's length bound unrolls into this many states at most


def rewrite_string(walk: Walker, node: Schema, where: str) -> Plain | Text:
    fmt = node.get("format")
    least, most = node.get("minLength", 0), node.get("maxLength")
    if most is not None and least > most:
        raise walk.no_value(where, "'minLength' is above 'maxLength'")
    if fmt is not None and fmt not in FORMATS:
        if fmt in checked_formats(walk.root):
            raise walk.refuse(where, f"The format '{fmt}'")
        fmt = None
    pattern = node.get("pattern", [])
    patterns = tuple(pattern if isinstance(pattern, list) else [pattern])
    excluded = tuple(v for v in node.get("x-except", []) if isinstance(v, str))
    text = Text(fmt, patterns, tuple(node.get("x-antipatterns", ())), excluded, least, most)
    if text == Text():
        return Plain("string")
    if text.content == Text():
        return text
    return _automaton_fits(walk, text, where, "pattern" if patterns else "format" if fmt else "not")


def _automaton_fits(walk: Walker, text: Text, where: str, keyword: str) -> Text:
    """`text` with its automaton, once it is known to build (a length bound its texts never reach goes)."""
    bare = text.content
    try:
        dfa = walk.automaton(bare)
    except PatternError as exc:
        raise walk.refuse(where, f"'{keyword}' ({exc})") from None
    assert dfa is not None
    if dfa.empty:
        positive = replace(bare, antipatterns=(), excluded=())
        if positive != bare and not (walk.automaton(positive) or dfa).empty:  # what a `not` took away
            raise walk.no_value(where, "no string is left by its 'not'")
        raise walk.refuse(where, f"'{keyword}' (no string the grammar can write matches it)")
    least, most = text.least, text.most
    longest = _longest(dfa)
    if most is not None and longest is not None and longest <= most:
        most = None
    if least > _MAX_DFA_LENGTH:
        raise walk.refuse(where, f"'{keyword}' with a 'minLength' above {_MAX_DFA_LENGTH}")
    problem = "these lengths (no string allowed the grammar can write)"
    for cap in _caps(least, most):
        try:
            bounded = with_length(dfa, least, cap) if least or cap is not None else dfa
        except PatternError as exc:
            problem = str(exc)
            continue
        if bounded.empty:
            break
        return replace(text, most=cap, dfa=bounded)
    raise walk.refuse(where, f"'{keyword}' with {problem}")


def rewrite_number(walk: Walker, node: Schema, kind: Literal["integer", "number"], where: str) -> Plain | Number:
    if "x-except" in node:
        raise walk.refuse(where, "'not' of the values of a number")
    bounds = {k: v for k, v in node.items() if k in NUMBER_KEYWORDS}
    if not bounds:
        return Plain(kind)
    try:
        dfa = walk.number_automaton(kind, tuple(sorted(bounds.items())))
    except PatternError as exc:
        if str(exc) == "no number is allowed":
            raise walk.no_value(where, "no number is within the bounds") from None
        keyword = "multipleOf" if "multipleOf" in str(exc) else "the bounds"
        raise walk.refuse(where, f"{keyword} ({exc})") from None
    return Number(kind, tuple(sorted(bounds.items())), dfa)


def _caps(least: int, most: int | None) -> list[int | None]:
    """The length bounds a pattern's automaton is tried with, loosest first: its own where it
    unrolls small enough, then tighter ones (a shorter string is valid too), down to its least."""
    if most is None:
        return [None]
    own: list[int | None] = [most] if most <= _MAX_DFA_LENGTH else []
    return own + [cap for cap in (256, 128, 64, 32) if least <= cap < most]


def _longest(dfa: Dfa) -> int | None:
    """The most characters a text of `dfa` takes; None when there is no most (a cycle)."""
    if dfa.empty:
        return 0
    memo: dict[int, int] = {}
    path = {0}
    stack = [(0, iter(dfa.edges[0]))]
    while stack:
        state, edges = stack[-1]
        for _, target in edges:
            if target in path:
                return None
            if target not in memo:
                path.add(target)
                stack.append((target, iter(dfa.edges[target])))
                break
        else:
            stack.pop()
            path.discard(state)
            memo[state] = max((1 + memo[t] for _, t in dfa.edges[state]), default=0)
    return memo[0]
