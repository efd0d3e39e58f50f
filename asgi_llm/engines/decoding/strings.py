"""The automaton of a rewritten string schema's content: its format and patterns at once,
within its lengths. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .automata import Dfa, compile_pattern, intersect, with_length
from .formats import FORMATS

__all__ = ["string_dfa"]


def string_dfa(node: Mapping[str, Any]) -> Dfa | None:
    """The automaton of a rewritten string's content; None for plain strings (lengths at most)."""
    patterns = node.get("x-patterns", [])
    fmt = node.get("format")
    if not patterns and fmt is None:
        return None
    dfa: Dfa | None = compile_pattern(f"^(?:{FORMATS[fmt]})$") if fmt is not None else None
    for pattern in patterns:
        one = compile_pattern(pattern)
        dfa = one if dfa is None else intersect(dfa, one)
    assert dfa is not None
    if "minLength" in node or "maxLength" in node:
        dfa = with_length(dfa, node.get("minLength", 0), node.get("maxLength"))
    return dfa
