"""Strings and numbers in the schema rewrite: formats, patterns and their negations, lengths,
bounds. Each automaton is built here once per compile (a format used in fifty fields too), so
what cannot be held is a 400 naming the keyword before any token. Pure."""

from __future__ import annotations

import json

from .automata import Dfa, with_length
from .checks import checked_formats
from .formats import FORMATS
from .numbers import number_dfa
from .pattern import PatternError
from .strings import string_dfa
from .walk import Schema, Walker

__all__ = ["NUMBER_KEYWORDS", "rewrite_number", "rewrite_string"]

NUMBER_KEYWORDS = frozenset(
    {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "x-fractional"}
)
_MAX_DFA_LENGTH = 256  # a pattern or format's length bound unrolls into this many states at most


def rewrite_string(walk: Walker, node: Schema, where: str) -> Schema:
    fmt = node.get("format")
    least, most = node.get("minLength", 0), node.get("maxLength")
    if most is not None and least > most:
        raise walk.no_value(where, "'minLength' is above 'maxLength'")
    out: Schema = {"type": "string"}
    if fmt in FORMATS:
        out["format"] = fmt
    elif fmt is not None and fmt in checked_formats(walk.root):
        raise walk.refuse(where, f"The format '{fmt}'")
    pattern = node.get("pattern", [])
    if pattern:
        out["x-patterns"] = pattern if isinstance(pattern, list) else [pattern]
    excluded = [v for v in node.get("x-except", []) if isinstance(v, str)]
    if excluded:
        out["x-except"] = excluded
    if node.get("x-antipatterns"):
        out["x-antipatterns"] = node["x-antipatterns"]
    if least:
        out["minLength"] = least
    if most is not None:
        out["maxLength"] = most
    if {"format", "x-patterns", "x-except", "x-antipatterns"} & out.keys():
        return _automaton_fits(walk, out, where, "pattern" if pattern else "format" if fmt in FORMATS else "not")
    return out


def _automaton_fits(walk: Walker, node: Schema, where: str, keyword: str) -> Schema:
    """`node` once its automaton is known to build (a length bound its texts never reach goes)."""
    bare = {k: v for k, v in node.items() if k not in ("minLength", "maxLength")}
    key = json.dumps(bare, sort_keys=True)
    try:
        dfa = walk.automata[key] if key in walk.automata else walk.automata.setdefault(key, string_dfa(bare))
    except PatternError as exc:
        raise walk.refuse(where, f"'{keyword}' ({exc})") from None
    assert dfa is not None
    if dfa.empty:
        positive = {k: v for k, v in bare.items() if k not in ("x-antipatterns", "x-except")}
        if positive != bare and not (string_dfa(positive) or dfa).empty:  # what a `not` took away
            raise walk.no_value(where, "no string is left by its 'not'")
        raise walk.refuse(where, f"'{keyword}' (no string the grammar can write matches it)")
    longest = _longest(dfa)
    if node.get("maxLength") is not None and longest is not None and longest <= node["maxLength"]:
        node = {k: v for k, v in node.items() if k != "maxLength"}
    least, most = node.get("minLength", 0), node.get("maxLength")
    if least > _MAX_DFA_LENGTH:
        raise walk.refuse(where, f"'{keyword}' with a 'minLength' above {_MAX_DFA_LENGTH}")
    problem = "these lengths (no string allowed the grammar can write)"
    for cap in _caps(least, most):
        try:
            empty = with_length(dfa, least, cap).empty
        except PatternError as exc:
            problem = str(exc)
            continue
        if empty:
            break
        return {**node, "maxLength": cap} if cap is not None else node
    raise walk.refuse(where, f"'{keyword}' with {problem}")


def rewrite_number(walk: Walker, node: Schema, kind: str, where: str) -> Schema:
    if "x-except" in node:
        raise walk.refuse(where, "'not' of the values of a number")
    out = {k: v for k, v in node.items() if k in NUMBER_KEYWORDS}
    out["type"] = kind
    try:
        number_dfa(out)
    except PatternError as exc:
        if str(exc) == "no number is allowed":
            raise walk.no_value(where, "no number is within the bounds") from None
        keyword = "multipleOf" if "multipleOf" in str(exc) else "the bounds"
        raise walk.refuse(where, f"{keyword} ({exc})") from None
    return out


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
