"""What the parts of the schema rewrite share: the walker they call back into for sub-schemas,
and the error for a schema no value satisfies. Pure.

`Schema` is what the walk reads: JSON Schema, and the keywords the rewrite itself adds on the
way for what it has turned positive (`extended`). What it writes are `forms`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from ...core.errors import InvalidRequest, Unsupported
from .automata import Dfa
from .forms import Form, Text

__all__ = ["Schema", "Unsatisfiable", "Walker"]

Schema = dict[str, Any]


class Unsatisfiable(InvalidRequest):
    """No value satisfies the schema at some place: a 400 where the place is required, and a
    part left out of the grammar (an optional property, an `anyOf` branch, a tool) where not."""


class Walker(Protocol):
    """The rewrite, as its parts see it."""

    param: str
    root: Mapping[str, Any]  # the whole schema, as the client sent it

    def automaton(self, text: Text) -> Dfa | None:
        """`strings.string_dfa(text)`, built once per walk (a format used in fifty fields too);
        raises `PatternError` as it does."""
        ...

    def number_automaton(self, kind: str, bounds: tuple[tuple[str, Any], ...]) -> Dfa:
        """`numbers.number_dfa` of these bounds, built once per walk (a `oneOf` narrowed by negated
        bounds asks for the same ranges again and again); raises `PatternError` as it does."""
        ...

    def node(self, schema: Any, where: str, depth: int) -> Form:
        """`schema` (at the JSON path `where`, `depth` levels in) rewritten."""
        ...

    def all_of(self, parts: list[Any], where: str, depth: int) -> Form:
        """`parts` (schemas that must all hold) merged and rewritten: `Unsatisfiable` at `where`
        where no value satisfies them, so that a caller leaving out what is optional can."""
        ...

    def follow(self, schema: Any) -> Any:
        """`schema` with its top-level references followed (for a negation)."""
        ...

    def refuse(self, where: str, what: str) -> Unsupported:
        """The 400 for `what` at `where`, which decoding cannot enforce."""
        ...

    def no_value(self, where: str, why: str) -> Unsatisfiable:
        """The error for a place no value satisfies."""
        ...
