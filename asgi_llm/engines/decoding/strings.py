"""The automaton of a string form's content: its format and patterns at once, within its lengths. Pure."""

from __future__ import annotations

from .automata import Dfa, compile_pattern, intersect, literals, negated, with_length
from .formats import FORMATS
from .forms import Text

__all__ = ["string_dfa"]


def string_dfa(text: Text) -> Dfa | None:
    """The automaton of `text`'s content; None for plain strings (lengths at most). Its
    `antipatterns` are patterns the string must not match, `excluded` values it must not be."""
    parts = [compile_pattern(f"^(?:{FORMATS[text.format]})$")] if text.format is not None else []
    parts += [compile_pattern(pattern) for pattern in text.patterns]
    parts += [negated(compile_pattern(pattern)) for pattern in text.antipatterns]
    if text.excluded:
        parts.append(negated(literals(text.excluded)))
    if not parts:
        return None
    dfa = parts[0]
    for part in parts[1:]:
        dfa = intersect(dfa, part)
    if text.least or text.most is not None:
        dfa = with_length(dfa, text.least, text.most)
    return dfa
