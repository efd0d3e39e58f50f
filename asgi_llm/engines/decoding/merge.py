"""Schemas that must all hold at once (`allOf`, a `$ref` beside its siblings, keywords beside the
branches of an `anyOf`), merged into one schema with the same meaning. Pure.

Each keyword combines by its own rule: `type`s and `enum`s intersect, bounds take the tightest,
`required` lists join, sub-schemas that meet become an `allOf` for the rewrite to merge in turn,
and properties one part declares are held to the other part's extra-key schema. A keyword whose
parts cannot be merged here (two `$ref`s, two `anyOf`s) is left in a residual `allOf`, so the
rewrite resolves one side first. What no value satisfies raises `NoValue`; what the grammar
cannot hold raises `Clash`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = ["ANNOTATIONS", "Clash", "NoValue", "both", "merge", "types_of"]

Schema = dict[str, Any]

ANNOTATIONS = frozenset(
    {"title", "description", "examples", "default", "deprecated", "readOnly", "writeOnly", "$comment", "$schema"}
    | {"contentMediaType", "contentEncoding", "contentSchema", "$defs", "definitions", "$anchor", "$id"}
    | {"discriminator", "nullable", "x-go-type", "markdownDescription"}
)
_ALL_TYPES = ("object", "array", "string", "number", "integer", "boolean", "null")
_TIGHTEST: dict[str, Callable[[Any, Any], Any]] = {
    **dict.fromkeys(("minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties"), max),
    **dict.fromkeys(("maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties"), min),
    **dict.fromkeys(("minContains",), max),
    **dict.fromkeys(("maxContains",), min),
}
_SUBSCHEMA = frozenset({"items", "additionalItems", "propertyNames", "contains", "additionalProperties"})
_RESIDUAL = frozenset({"$ref", "anyOf", "oneOf", "x-cases", "if", "then", "else"})
_OBJECT = ("properties", "patternProperties", "additionalProperties")
_ARRAY = ("items", "prefixItems", "additionalItems")


class NoValue(ValueError):
    """No value satisfies the merged schema; the message says why."""


class Clash(ValueError):
    """The parts' keyword cannot be merged into one the grammar holds; the message names it."""


def both(*parts: Any) -> Any:
    """Sub-schemas that must all hold, as one: `false` where one is `false` (a key that must be
    absent stays plainly so), an `allOf` otherwise."""
    kept = [p for p in parts if p is not True]
    if any(p is False for p in kept):
        return False
    return kept[0] if len(kept) == 1 else {"allOf": kept} if kept else True


def types_of(schema: Mapping[str, Any]) -> frozenset[str] | None:
    """The types a schema's `type` allows (None: any)."""
    kind = schema.get("type")
    if kind is None:
        return None
    return frozenset([kind] if isinstance(kind, str) else kind)


def merge(parts: Iterable[Any]) -> Schema:
    """One schema that holds exactly when every part does."""
    merged: Schema = {}
    for part in parts:
        if part is True:
            continue
        if part is False or not isinstance(part, Mapping):
            raise NoValue("a `false` schema")
        part = {k: v for k, v in part.items() if k not in ANNOTATIONS}
        _conditional(merged, part)
        if any(k in merged for k in _OBJECT) and any(k in part for k in _OBJECT):
            merged, part = _cross_objects(merged, part)
        if any(k in merged for k in _ARRAY) and any(k in part for k in _ARRAY):
            merged, part = _tuples(merged), _tuples(part)
            if "prefixItems" in merged or "prefixItems" in part:
                merged, part = _cross_tuples(merged, part)
        for key, value in part.items():
            if key not in merged:
                merged[key] = value
            elif merged[key] != value:
                _combine(merged, key, value)
    return merged


def _conditional(merged: Schema, part: Schema) -> None:
    """A part's `if`/`then`/`else` taken out of it, as one: into `merged` where it has none yet,
    else as an `allOf` part of its own (a `then` must never meet another part's `if`). A `then`
    or `else` without an `if` says nothing, and goes."""
    if not {"if", "then", "else"} & part.keys():
        return
    conditional: Schema = {k: part.pop(k) for k in ("if", "then", "else") if k in part}
    if "if" not in conditional:
        return
    if "if" in merged:
        merged["allOf"] = [*merged.get("allOf", []), conditional]
    else:
        merged.update(conditional)


def _combine(merged: Schema, key: str, value: Any) -> None:
    old = merged[key]
    if key in _TIGHTEST:
        merged[key] = _TIGHTEST[key](old, value)
    elif key == "type":
        merged[key] = _type_meet(old, value)
    elif key in ("enum", "const"):
        _values_meet(merged, key, value)
    elif key in ("required", "x-except", "x-antipatterns"):
        merged[key] = list(dict.fromkeys([*old, *value]))
    elif key == "pattern":
        merged[key] = [*(old if isinstance(old, list) else [old]), *(value if isinstance(value, list) else [value])]
    elif key == "multipleOf":
        merged[key] = _lcm(old, value)
    elif key in ("uniqueItems", "x-fractional"):
        merged[key] = old or value
    elif key in ("properties", "dependentSchemas"):
        merged[key] = {**old, **{n: (both(old[n], s) if n in old else s) for n, s in value.items()}}
    elif key == "dependentRequired":
        merged[key] = {**old, **{n: list(dict.fromkeys([*old.get(n, []), *v])) for n, v in value.items()}}
    elif key in _SUBSCHEMA:
        merged[key] = both(old, value)
    elif key == "not":
        merged[key] = {"anyOf": [old, value]}
    elif key == "allOf":
        merged[key] = [*old, *value]
    elif key in _RESIDUAL:
        merged["allOf"] = [*merged.get("allOf", []), {key: value}]
    else:
        raise Clash(f"'{key}' is combined from several places with different values")


def _type_meet(a: Any, b: Any) -> Any:
    left, right = types_of({"type": a}) or frozenset(), types_of({"type": b}) or frozenset()
    both = set(left & right)
    if ("integer" in left and "number" in right) or ("number" in left and "integer" in right):
        both.add("integer")
    if not both:
        raise NoValue(f"no type is both {a} and {b}")
    kinds = [t for t in _ALL_TYPES if t in both]
    return kinds[0] if len(kinds) == 1 else kinds


def _values_meet(merged: Schema, key: str, value: Any) -> None:
    new = [value] if key == "const" else list(value)
    kept = [v for v in ([merged[key]] if key == "const" else merged[key]) if any(_same(v, n) for n in new)]
    if not kept:
        raise NoValue(f"no value is in both '{key}' lists")
    merged.pop(key)
    merged["enum"] = kept


def _same(a: Any, b: Any) -> bool:
    """JSON equality: 1 and 1.0 are the same number, `true` and 1 are not."""
    return type(a) is type(b) and a == b or (_number(a) and _number(b) and a == b)


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _lcm(a: Any, b: Any) -> Any:
    if isinstance(a, int) and isinstance(b, int) and a > 0 and b > 0:
        return a * b // math.gcd(a, b)
    raise Clash("'multipleOf' is combined from several places with different values")


def _cross_objects(left: Schema, right: Schema) -> tuple[Schema, Schema]:
    """Each side's properties held to what the other side says of a key it does not declare
    (its matching `patternProperties`, else its `additionalProperties`)."""
    for one, other in ((left, right), (right, left)):
        differ = one.get("patternProperties") and other.get("patternProperties", {}) != one["patternProperties"]
        if differ and (other.get("patternProperties") or other.get("additionalProperties", True) is not True):
            raise Clash("'patternProperties' is combined from several places with different values")
    left, right = dict(left), dict(right)
    left_props, right_props = left.get("properties", {}), right.get("properties", {})
    left["properties"] = _held(left_props, right, left_props.keys() - right_props.keys())
    right["properties"] = _held(right_props, left, right_props.keys() - left_props.keys())
    if not left["properties"]:
        del left["properties"]
    if not right["properties"]:
        del right["properties"]
    return left, right


def _tuples(schema: Schema) -> Schema:
    """Draft 7's tuples (`items` a list, `additionalItems`) in 2020-12's words."""
    if not isinstance(schema.get("items"), list):
        return schema
    out = {k: v for k, v in schema.items() if k not in ("items", "additionalItems")}
    out["prefixItems"] = schema["items"]
    return out | ({"items": schema["additionalItems"]} if "additionalItems" in schema else {})


def _cross_tuples(left: Schema, right: Schema) -> tuple[Schema, Schema]:
    """Both sides as tuples of one length, each position held to both (a side without a tuple,
    or a shorter one, holds its extra positions to its `items`)."""
    size = max(len(left.get("prefixItems", [])), len(right.get("prefixItems", [])))

    def padded(side: Schema) -> Schema:
        prefix = list(side.get("prefixItems", []))
        return {**side, "prefixItems": prefix + [side.get("items", True)] * (size - len(prefix))}

    left, right = padded(left), padded(right)
    joined = [both(a, b) for a, b in zip(left["prefixItems"], right["prefixItems"], strict=True)]
    return {**left, "prefixItems": joined}, {k: v for k, v in right.items() if k != "prefixItems"}


def _held(properties: Mapping[str, Any], other: Schema, names: Iterable[str]) -> dict[str, Any]:
    out = dict(properties)
    for name in names:
        rules = [s for p, s in other.get("patternProperties", {}).items() if re.search(p, name)]
        if not rules and "additionalProperties" in other:
            rules = [other["additionalProperties"]]
        if rules:
            out[name] = both(properties[name], *rules)
    return out
