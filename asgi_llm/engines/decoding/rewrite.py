"""A JSON Schema rewritten into the typed `forms` that `schema_gbnf` turns into a grammar exactly. Pure.

One walk over the schema. References are inlined, and a recursive one becomes a named rule
(`Ref`, its body in `Rewritten.defs`). `allOf`, a `$ref` beside siblings and keywords beside
`anyOf`/`oneOf` branches are merged (`merge`); `not` and `if`/`then`/`else` become positive
keywords (`negation`), dependencies become branches (`objects`). A branch, an optional property
or an array's items that no value can satisfy is left out, with a warning; a required part that
none can satisfy is a 400 (`Unsatisfiable`). Bounds, patterns, formats and key rules are each
tried on their own automaton here, which their form carries on to the grammar, so what cannot be
held is a 400 naming it and where, before any token.

The parts: objects (`objects`), arrays (`arrays`), strings and numbers (`scalars`); `enum` and
`const` are `Values`, branches a `Choice`. `oneOf` comes out as a `Choice` whose branches no
document can match two of (`oneof`)."""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Mapping
from typing import Any

from ...core.errors import InvalidRequest, Unsupported
from .arrays import rewrite_array
from .automata import Dfa
from .checks import validator
from .extended import as_json_schema
from .forms import ANY, Choice, Closed, Form, Plain, Ref, Rewritten, Text, Values, values_of
from .merge import Clash, NoValue, merge
from .negation import conditional, negate
from .numbers import number_dfa
from .objects import DEPENDENCIES, dependencies, rewrite_object
from .oneof import separated
from .pattern import PatternError
from .scalars import NUMBER_KEYWORDS, rewrite_number, rewrite_string
from .strings import string_dfa
from .walk import Schema, Unsatisfiable

__all__ = ["literal_safe", "rewrite"]

log = logging.getLogger("asgi_llm.engine")

_UNENFORCEABLE = frozenset({"$dynamicRef", "$dynamicAnchor", "$recursiveRef", "$recursiveAnchor"})
_UNENFORCEABLE |= {"unevaluatedItems", "unevaluatedProperties"}
_HARMLESS: dict[str, Any] = {"unevaluatedItems": True, "unevaluatedProperties": True}
_BY_TYPE = {
    "object": frozenset({"properties", "required", "additionalProperties", "patternProperties", "propertyNames"})
    | {"minProperties", "maxProperties", "x-outside"},
    "array": frozenset({"items", "prefixItems", "minItems", "maxItems", "additionalItems", "uniqueItems"})
    | {"contains", "minContains", "maxContains"},
    "string": frozenset({"minLength", "maxLength", "format", "pattern"}),
    "number": NUMBER_KEYWORDS,
}
_STRUCTURE = frozenset({"type", "enum", "const", "$ref", "$defs", "definitions", "allOf", "anyOf", "oneOf", "$id"})
_STRUCTURE |= {"not", "if", "then", "else", "x-except", "x-antipatterns", "x-cases", *DEPENDENCIES}
_KNOWN = _STRUCTURE | _UNENFORCEABLE | frozenset().union(*_BY_TYPE.values())
_MAX_DEPTH = 64
_MAX_NODES = 20_000  # schema nodes one rewrite writes
_MAX_WORK = 3 * _MAX_NODES  # schema nodes it walks, ways that led nowhere included
_MAX_AUTOMATA = 2000  # distinct string automata it builds (each negation a pattern meets makes more)


def literal_safe(value: Any) -> bool:
    """Whether a value is written as a grammar literal as it is (no backslashes to escape)."""
    return "\\" not in json.dumps(value, ensure_ascii=False)


def rewrite(schema: Mapping[str, Any], param: str) -> Rewritten:
    """`schema` (checked already) in the forms the grammar is built from."""
    walk = _Rewrite(schema, param)
    return Rewritten(walk.node(schema, "", 0), walk.defs)


class _Rewrite:
    """One walk over a schema, node by node; `where` is the JSON path used in messages."""

    def __init__(self, root: Mapping[str, Any], param: str) -> None:
        self.root = root
        self.param = param
        self.resolving: dict[str, str] = {}  # a reference (with its siblings) being rewritten: its rule's name
        self.recursive: set[str] = set()  # rules referred to from inside their own body
        self.defs: dict[str, Form] = {}
        self.done: dict[str, Form] = {}  # references rewritten already
        self.automata: dict[Text, Dfa | None] = {}  # string automata built already, by their content
        self.numbers: dict[tuple[str, tuple[tuple[str, Any], ...]], Dfa] = {}  # number automata, by their bounds
        self.count = 0
        self.work = 0

    def automaton(self, text: Text) -> Dfa | None:
        if text not in self.automata:
            if len(self.automata) >= _MAX_AUTOMATA:
                raise PatternError(f"the schema needs more than {_MAX_AUTOMATA} string automata")
            self.automata[text] = string_dfa(text)
        return self.automata[text]

    def number_automaton(self, kind: str, bounds: tuple[tuple[str, Any], ...]) -> Dfa:
        key = (kind, bounds)
        if key not in self.numbers:
            self.numbers[key] = number_dfa({**dict(bounds), "type": kind})
        return self.numbers[key]

    def refuse(self, where: str, what: str) -> Unsupported:
        return Unsupported(
            f"{what} at '{where or '/'}' in '{self.param}' cannot be enforced while decoding.", param=self.param
        )

    def no_value(self, where: str, why: str) -> Unsatisfiable:
        return Unsatisfiable(f"No value allowed at '{where or '/'}' in '{self.param}': {why}.", param=self.param)

    def node(self, schema: Any, where: str, depth: int) -> Form:
        if schema is True:
            return ANY
        if schema is False:
            raise self.no_value(where, "a `false` schema")
        self.count += 1
        self.work += 1
        if depth > _MAX_DEPTH or self.count > _MAX_NODES or self.work > _MAX_WORK:
            raise self.refuse(where, "A schema this deep or this large")
        node = {k: v for k, v in schema.items() if k in _KNOWN}
        for key in sorted(_UNENFORCEABLE & node.keys()):
            if key not in _HARMLESS or node[key] != _HARMLESS[key]:
                raise self.refuse(where, f"'{key}'")
            del node[key]
        if "$id" in node and depth > 0 and not str(node["$id"]).startswith("#") and '"$ref"' in json.dumps(node):
            raise self.refuse(where, "A nested '$id' with references under it")
        for key in ("$id", "$defs", "definitions"):  # references are inlined, definitions go
            node.pop(key, None)
        try:
            return self.shape(self.positive(node), where, depth)
        except NoValue as exc:
            raise self.no_value(where, str(exc)) from None
        except Clash as exc:
            raise self.refuse(where, str(exc)) from None

    def positive(self, node: Schema) -> Schema:
        """`node` without `not`, `if`/`then`/`else` and dependencies: what they say, as parts to merge."""
        if "not" in node:
            node = merge([{k: v for k, v in node.items() if k != "not"}, negate(node.pop("not"), self.follow)])
        if "if" in node:
            node = conditional(node, self.follow)
        node.pop("then", None)
        node.pop("else", None)
        return dependencies(node) if DEPENDENCIES & node.keys() else node

    def shape(self, node: Schema, where: str, depth: int) -> Form:
        if "$ref" in node:
            return self.ref(node, where, depth)
        if "anyOf" in node or "oneOf" in node or "x-cases" in node:
            return self.union(node, where, depth)
        if "allOf" in node:
            parts = node.pop("allOf")
            return self.node(merge([node, *parts]), where, depth + 1)
        if "enum" in node or "const" in node:
            return self.values(node, where)
        kind = node.get("type")
        if isinstance(kind, list):
            return self.kinds(node, kind, where, depth)
        kind = kind if kind is not None else self.infer(node, where, depth)
        if not isinstance(kind, str | None):
            return kind
        if "x-except" in node and kind in ("boolean", "null"):
            return self.values({**node, "enum": [True, False] if kind == "boolean" else [None]}, where)
        if "x-except" in node and kind in ("object", "array"):
            raise self.refuse(where, f"'not' of the values of an {kind}")
        if kind == "object":
            return rewrite_object(self, node, where, depth)
        if kind == "array":
            return rewrite_array(self, node, where, depth)
        if kind == "string":
            return rewrite_string(self, node, where)
        if kind in ("integer", "number"):
            return rewrite_number(self, node, "integer" if kind == "integer" else "number", where)
        return Plain("boolean") if kind == "boolean" else Plain("null") if kind == "null" else ANY

    def kinds(self, node: Schema, kinds: list[str], where: str, depth: int) -> Form:
        rest = {k: v for k, v in node.items() if k != "type"}
        kinds = [k for k in dict.fromkeys(kinds) if not (k == "integer" and "number" in kinds)]
        return self.union({**rest, "x-cases": [{"type": k} for k in kinds]}, where, depth)

    def ref(self, node: Schema, where: str, depth: int) -> Form:
        """A local reference, inlined; one met again inside itself becomes a rule of its own."""
        ref = node.pop("$ref")
        if not isinstance(ref, str) or not ref.startswith("#"):
            raise self.refuse(where, f"The reference '{ref}' (only '#/...' references are)")
        key = ref + json.dumps(node, sort_keys=True)
        if key in self.resolving:
            self.recursive.add(self.resolving[key])
            return Ref(self.resolving[key])
        if key in self.done:
            return self.done[key]
        target = self.pointer(ref, where)
        name = _rule_name(ref, key, self.param)
        self.resolving[key] = name
        try:
            out = self.node(merge([node, target]), ref[1:], depth + 1)
        except NoValue as exc:
            raise self.no_value(where, str(exc)) from None
        finally:
            del self.resolving[key]
        if name in self.recursive:
            self.defs[name] = out
            out = Ref(name)
        self.done[key] = out
        return out

    def pointer(self, ref: str, where: str) -> Any:
        target: Any = self.root
        for raw in ref[1:].split("/")[1:]:
            part = raw.replace("~1", "/").replace("~0", "~")
            if isinstance(target, Mapping) and part in target:
                target = target[part]
            elif isinstance(target, list) and part.isdigit() and int(part) < len(target):
                target = target[int(part)]
            else:
                raise InvalidRequest(
                    f"'{ref}' at '{where or '/'}' in '{self.param}' refers to nothing.", param=self.param
                )
        return target

    def union(self, node: Schema, where: str, depth: int) -> Form:
        """Each branch with the node's other keywords merged in; a branch no value satisfies is left
        out, with a warning where it is the client's (`x-cases` are the rewrite's own branches)."""
        key = next(k for k in ("anyOf", "oneOf", "x-cases") if k in node)
        options = node.pop(key)
        written: list[tuple[int, Form]] = []
        for i, option in enumerate(options):
            at = where if key == "x-cases" else f"{where}/{key}/{i}"
            out = self.branch([node, option], at, depth, warn=key != "x-cases")
            written += [(i, out)] if out is not None else []
        if key == "oneOf" and len(written) > 1:
            written = self.exclusive(node, options, written, where, depth)
        kept = list(dict.fromkeys(alt for _, out in written for alt in _options(out)))
        if not kept:
            what = f"branch of '{key}'" if key != "x-cases" else "case of its 'not', 'if' or dependencies"
            raise self.no_value(where, f"no {what} admits a value")
        return kept[0] if len(kept) == 1 else Choice(tuple(kept))

    def all_of(self, parts: list[Any], where: str, depth: int) -> Form:
        try:
            merged = merge(parts)
        except NoValue as exc:
            raise self.no_value(where, str(exc)) from None
        except Clash as exc:
            raise self.refuse(where, str(exc)) from None
        return self.node(merged, where, depth)

    def branch(self, parts: list[Any], at: str, depth: int, *, warn: bool = False) -> Form | None:
        """`parts` merged and rewritten; None where no value satisfies them."""
        try:
            return self.all_of(parts, at, depth + 1)
        except Unsatisfiable as exc:
            if warn:
                log.warning("left out of the grammar for %s: %s", self.param, exc)
            return None

    def exclusive(
        self, node: Schema, options: list[Any], written: list[tuple[int, Form]], where: str, depth: int
    ) -> list[tuple[int, Form]]:
        """A `oneOf` decoded as an `anyOf` must never write a document two branches take: a branch
        that may meet others is held to their negations too (and left out if nothing remains).
        A branch rewritten anew may write documents its first form did not (the client's branch
        is wider than what the rewrite keeps of it), so it is tested again until none meets."""
        kept = []
        for i, out in written:
            meets = self.meeting(node, options, written, i, out, set())
            at = f"{where}/oneOf/{i}"
            narrowed: Form | None = out
            while meets and narrowed is not None:
                narrowed = self.narrowed([node, options[i]], [options[j] for j in sorted(meets)], out, at, depth)
                more = self.meeting(node, options, written, i, narrowed, meets) if narrowed is not None else set()
                meets = meets | more if more else set()
            kept += [(i, narrowed)] if narrowed is not None else []
        return kept

    def narrowed(self, parts: list[Any], others: list[Any], out: Form, at: str, depth: int) -> Form | None:
        """`parts` where none of `others` holds. Where `out` writes closed objects only, first among
        those objects (their keys known, `additionalProperties: false` has a negation, and the
        negations stay small; the branch is held to those keys, as `out` was); where that leaves
        nothing or cannot be done, by the exact negations."""
        names = _closed_names(out)
        if names is not None:
            count = self.count
            within = {"type": "object", "propertyNames": {"enum": sorted(names)}}
            try:
                kept = self.branch([*parts, within, *(negate(o, self.follow, names) for o in others)], at, depth)
            except (Clash, Unsupported):
                kept = None
            if kept is not None:
                return kept
            self.count = count  # a way that led nowhere: its nodes do not count against the schema's size
        try:
            return self.branch([*parts, *(negate(other, self.follow) for other in others)], at, depth)
        except Clash as exc:
            raise self.refuse(at, f"A 'oneOf' branch that may match another's documents ({exc})") from None

    def meeting(
        self, node: Schema, options: list[Any], written: list[tuple[int, Form]], i: int, out: Form, known: set[int]
    ) -> set[int]:
        """The branches besides `i` and `known` that a document of `out` may also match: every
        branch of the client's, those left out of the grammar too (what the rewrite found no value
        for may still take values it does not write, as a branch of `properties` takes any string)."""
        forms = dict(written)
        found = set()
        for j in range(len(options)):
            if j == i or j in known:
                continue
            try:
                theirs = merge([node, options[j]])
            except NoValue:
                continue  # no value takes that branch with the rest of the schema: none can meet it
            except Clash:
                theirs = options[j]  # out's documents hold to `node` already: the branch alone decides
            if not separated(out, theirs, self.follow, forms.get(j)):
                found.add(j)
        return found

    def follow(self, schema: Any) -> Any:
        """`schema` with its top-level `$ref`s followed and `allOf`s merged, for the `oneOf` test."""
        for _ in range(8):
            if not isinstance(schema, Mapping) or not {"$ref", "allOf"} & schema.keys():
                return schema
            key = "$ref" if "$ref" in schema else "allOf"
            rest = {k: v for k, v in schema.items() if k != key}
            try:
                parts = [self.pointer(schema["$ref"], "")] if key == "$ref" else list(schema["allOf"])
                schema = merge([rest, *parts])
            except (NoValue, Clash, InvalidRequest):
                return schema
        return schema

    def values(self, node: Schema, where: str) -> Values:
        """`enum` and `const`, keeping only the values the rest of the schema allows."""
        rest = {k: v for k, v in node.items() if k not in ("enum", "const", "x-except")}
        values = [node["const"]] if "const" in node else list(node["enum"])
        if "const" in node and "enum" in node:
            values = [v for v in values if v in node["enum"]]
        values = [v for v in values if v not in node.get("x-except", [])]
        try:
            check = validator(as_json_schema(rest))
            kept = [v for v in values if check.is_valid(v)]
        except Exception:  # noqa: BLE001 (a reference inside `rest` cannot be followed on its own)
            raise self.refuse(where, "'enum' beside references") from None
        if not kept:
            raise self.no_value(where, "no value of 'enum' or 'const' fits the rest of the schema")
        if not all(literal_safe(v) for v in kept):
            raise self.refuse(where, "A value with backslashes, quotes or control characters")
        return values_of(kept)

    def infer(self, node: Schema, where: str, depth: int) -> str | Form | None:
        """The type the keywords imply; keywords of several types, each applying to its own."""
        kinds = [kind for kind, keywords in _BY_TYPE.items() if keywords & node.keys()]
        if len(kinds) < 2:
            return kinds[0] if kinds else None
        return self.kinds(node, kinds, where, depth)


def _options(form: Form) -> tuple[Form, ...]:
    return form.options if isinstance(form, Choice) else (form,)


def _closed_names(written: Form) -> set[str] | None:
    """The keys a rewritten schema's documents can have, where they are all closed objects."""
    alternatives = _options(written)
    if not all(isinstance(alt, Closed) for alt in alternatives):
        return None
    return {name for alt in alternatives if isinstance(alt, Closed) for name, _ in alt.properties}


def _rule_name(ref: str, key: str, param: str) -> str:
    """A rule name for a recursive reference, the same for the same reference and siblings in
    the same parameter, and distinct across parameters (several tools share one grammar)."""
    tail = re.sub("[^A-Za-z0-9]+", "-", ref.rsplit("/", 1)[-1]).strip("-")[:24] or "ref"
    return f"{tail}-{hashlib.sha1(f'{param}{key}'.encode()).hexdigest()[:8]}"
