"""The automaton of a rewritten string schema's content: its format and patterns at once,
within its lengths. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .automata import Dfa, compile_pattern, intersect, literals, negated, with_length
from .formats import FORMATS

__all__ = ["string_dfa"]


def string_dfa(node: Mapping[str, Any]) -> Dfa | None:
    """The automaton of a rewritten string's content; None for plain strings (lengths at most).
    `x-antipatterns` are patterns the string must not match, `x-except` values it must not be."""
    fmt = node.get("format")
    parts = [compile_pattern(f"^(?:{FORMATS[fmt]})$")] if fmt is not None else []
    parts += [compile_pattern(pattern) for pattern in node.get("x-patterns", [])]
    parts += [negated(compile_pattern(pattern)) for pattern in node.get("x-antipatterns", [])]
    if node.get("x-except"):
        parts.append(negated(literals(node["x-except"])))
    if not parts:
        return None
    dfa = parts[0]
    for part in parts[1:]:
        dfa = intersect(dfa, part)
    if "minLength" in node or "maxLength" in node:
        dfa = with_length(dfa, node.get("minLength", 0), node.get("maxLength"))
    return dfa
