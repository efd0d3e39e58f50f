"""The forms a JSON Schema takes once `rewrite` has walked it: what `schema_gbnf` writes, exactly. Pure.

Each form is a frozen dataclass, so equal sub-schemas are equal forms (the grammar writes one rule
for them) and a compile keeps its forms without copying. Strings and numbers carry the automaton
the rewrite built to try them (`dfa`), so the grammar spells the same one and nothing builds it
twice; it takes no part in equality, which the form's own fields decide.

A client's schema comes out as a `Rewritten`: its root form, and the bodies of its recursive
references (`Ref` names them).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from .automata import Dfa

__all__ = [
    "ANY",
    "ARRAYS",
    "OBJECTS",
    "Choice",
    "Closed",
    "Containing",
    "CountedHits",
    "Form",
    "FreeKeys",
    "Items",
    "KeyKinds",
    "Number",
    "Plain",
    "Ref",
    "Rewritten",
    "Text",
    "Tuple",
    "Unique",
    "Values",
    "finite_refs",
    "values_of",
]

PlainKind = Literal["object", "array", "string", "integer", "number", "boolean", "null"]


@dataclass(frozen=True)
class Plain:
    """Any value of one JSON type (`integer`: a number without a fraction)."""

    kind: PlainKind


@dataclass(frozen=True)
class Choice:
    """One of `options` (an `anyOf`; a `oneOf` once its branches are shown apart)."""

    options: tuple[Form, ...]


@dataclass(frozen=True)
class Values:
    """One of a list of values (`enum`, `const`), each kept as its JSON text, which the grammar writes."""

    texts: tuple[str, ...]

    @property
    def values(self) -> list[Any]:
        return [json.loads(text) for text in self.texts]


def values_of(values: Iterable[Any]) -> Values:
    return Values(tuple(json.dumps(v, ensure_ascii=False) for v in values))


@dataclass(frozen=True)
class Ref:
    """A recursive reference: the rule `name`, its body in `Rewritten.defs`."""

    name: str


@dataclass(frozen=True)
class Text:
    """A string: in its `format`, matching every one of `patterns` and none of `antipatterns`,
    none of `excluded`, `least` to `most` characters. `dfa` is all of that at once (None where
    only the lengths hold it)."""

    format: str | None = None
    patterns: tuple[str, ...] = ()
    antipatterns: tuple[str, ...] = ()
    excluded: tuple[str, ...] = ()
    least: int = 0
    most: int | None = None
    dfa: Dfa | None = field(default=None, compare=False, repr=False)

    @property
    def content(self) -> Text:
        """The same string without its lengths (what its automaton is built from)."""
        return Text(self.format, self.patterns, self.antipatterns, self.excluded)

    def accepts(self, text: str) -> bool:
        if not self.least <= len(text) <= (len(text) if self.most is None else self.most):
            return False
        return self.dfa is None or self.dfa.accepts(text)


@dataclass(frozen=True)
class Number:
    """A number of `kind` within `bounds` (JSON Schema's keywords: `minimum`, `multipleOf`...,
    and `x-fractional`: only numbers with a fraction); `dfa` spells them."""

    kind: Literal["integer", "number"]
    bounds: tuple[tuple[str, Any], ...]
    dfa: Dfa = field(compare=False, repr=False)

    @property
    def keywords(self) -> dict[str, Any]:
        return dict(self.bounds)


@dataclass(frozen=True)
class Closed:
    """An object of exactly these properties, written in order, required ones first; the others
    may be left out, so that `least` to `most` are written."""

    properties: tuple[tuple[str, Form], ...]
    required: tuple[str, ...] = ()
    least: int = 0
    most: int | None = None

    @property
    def declared(self) -> dict[str, Form]:
        return dict(self.properties)


@dataclass(frozen=True)
class FreeKeys:
    """An object of any keys (`keys`: the string they must be; None: any), each holding `values`."""

    values: Form
    keys: Text | None = None
    least: int = 0
    most: int | None = None


@dataclass(frozen=True)
class KeyKinds:
    """An object of free keys of several kinds, each (key, value) a pair of forms."""

    pairs: tuple[tuple[Form, Form], ...]
    least: int = 0
    most: int | None = None


@dataclass(frozen=True)
class Items:
    """An array of `least` to `most` items of `item`."""

    item: Form
    least: int = 0
    most: int | None = None


@dataclass(frozen=True)
class Tuple:
    """An array of `prefix` in full, then (with `rest`) more items, `least` to `most` in all."""

    prefix: tuple[Form, ...]
    rest: Form | None = None
    least: int = 0
    most: int | None = None


@dataclass(frozen=True)
class Containing:
    """An array of `item`s, `hits` of which (at least) are also `hit`s (`contains`)."""

    item: Form
    hit: Form
    hits: int


@dataclass(frozen=True)
class CountedHits:
    """An array of items each a `hit` or a `miss` (None: every item is a hit), `least` to `most` hits."""

    hit: Form
    miss: Form | None
    least: int
    most: int


@dataclass(frozen=True)
class Unique:
    """An array of `values`, each at most once, in their order, `least` to `most` of them."""

    values: Values
    least: int
    most: int


Form = (
    Plain
    | Choice
    | Values
    | Ref
    | Text
    | Number
    | Closed
    | FreeKeys
    | KeyKinds
    | Items
    | Tuple
    | Containing
    | CountedHits
    | Unique
)

ANY: Form = Choice(tuple(Plain(k) for k in ("object", "array", "string", "number", "boolean", "null")))
OBJECTS = (Closed, FreeKeys, KeyKinds)
"""The forms of objects (and `Plain("object")`)."""
ARRAYS = (Items, Tuple, Containing, CountedHits, Unique)
"""The forms of arrays (and `Plain("array")`)."""


@dataclass(frozen=True)
class Rewritten:
    """A client's schema as the grammar holds it: `root`, and the bodies of its recursive references."""

    root: Form
    defs: Mapping[str, Form] = field(default_factory=dict)

    @staticmethod
    def around(root: Form, parts: Iterable[Rewritten]) -> Rewritten:
        """`root` (built around the roots of `parts`) with every part's references (their names
        are distinct across parameters, so several tools share one grammar)."""
        defs: dict[str, Form] = {}
        for part in parts:
            defs.update(part.defs)
        return Rewritten(root, defs)


def finite_refs(defs: Mapping[str, Form]) -> set[str]:
    """The references that have a finite document: a least fixed point, grown until no body
    gains one (`{"next": <itself>}` required has none, and its rule could never end)."""
    done: set[str] = set()
    grown = True
    while grown:
        grown = False
        for name, body in defs.items():
            if name not in done and _finite(body, done):
                done.add(name)
                grown = True
    return done


def _finite(form: Form, done: set[str]) -> bool:
    """Whether `form` has a finite document, the references in `done` known to."""
    if isinstance(form, Ref):
        return form.name in done
    if isinstance(form, Choice):
        return any(_finite(option, done) for option in form.options)
    if isinstance(form, Closed):
        ending = [name for name, sub in form.properties if _finite(sub, done)]
        return set(form.required) <= set(ending) and len(ending) >= form.least
    if isinstance(form, FreeKeys):
        return not form.least or _finite(form.values, done)
    if isinstance(form, KeyKinds):
        return not form.least or any(_finite(value, done) for _, value in form.pairs)
    if isinstance(form, Items):
        return not form.least or _finite(form.item, done)
    if isinstance(form, Tuple):
        rest = form.rest is None or form.least <= len(form.prefix) or _finite(form.rest, done)
        return rest and all(_finite(item, done) for item in form.prefix)
    if isinstance(form, Containing | CountedHits):
        return not (form.hits if isinstance(form, Containing) else form.least) or _finite(form.hit, done)
    return True
