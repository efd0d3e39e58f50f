"""`not` and `if`/`then`/`else` turned into positive keywords, where a grammar can decide them. Pure.

A schema is the conjunction of its keywords, so its negation is the disjunction (an `anyOf`)
of each keyword's negation; most simple keywords negate into another simple keyword: `not`
a type is the other types, `not` a `required` name is that property absent (a `false` schema
on it), `not` `minimum: 3` is a number under 3. `if`/`then`/`else` is
`anyOf: [{allOf: [if, then]}, {allOf: [{not: if}, else]}]` (as `x-cases`, the
rewrite's own branches, left out without a warning where no value fits). What has no such form here (a
pattern, a format) raises `Clash`, and the rewrite refuses it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

from .merge import Clash, types_of

__all__ = ["conditional", "negate"]

Resolve = Callable[[Any], Any]  # a schema with its top-level `$ref` followed


def _same(schema: Any) -> Any:
    return schema


_MAX_STEPS = 400  # schemas one negation may read
_MAX_ONE_OF = 4  # a `not` of a `oneOf` becomes one case per pair of its branches
_KINDS = ("object", "array", "string", "number", "boolean", "null")  # "integer" lies inside "number"
_KEYWORDS = frozenset(  # what constrains a value; any other key of a schema is vacuous here
    {"type", "enum", "const", "required", "properties", "additionalProperties", "patternProperties", "items"}
    | {"prefixItems", "additionalItems", "contains", "minContains", "maxContains", "uniqueItems", "pattern"}
    | {"format", "multipleOf", "anyOf", "oneOf", "allOf", "not", "$ref", "if", "then", "else", "propertyNames"}
    | {"dependencies", "dependentRequired", "dependentSchemas", "unevaluatedItems", "unevaluatedProperties"}
    | {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength", "minItems"}
    | {"maxItems", "minProperties", "maxProperties", "x-except", "x-antipatterns", "x-cases", "x-outside", "x-extra"}
)
_OPPOSITE: dict[str, tuple[str, str, int]] = {  # keyword: (its negation, the type it bounds, shift)
    "minimum": ("exclusiveMaximum", "number", 0),
    "maximum": ("exclusiveMinimum", "number", 0),
    "exclusiveMinimum": ("maximum", "number", 0),
    "exclusiveMaximum": ("minimum", "number", 0),
    "minLength": ("maxLength", "string", -1),
    "maxLength": ("minLength", "string", 1),
    "minItems": ("maxItems", "array", -1),
    "maxItems": ("minItems", "array", 1),
    "minProperties": ("maxProperties", "object", -1),
    "maxProperties": ("minProperties", "object", 1),
}


def conditional(node: Mapping[str, Any], resolve: Resolve = _same) -> dict[str, Any]:
    """`node` with its `if`/`then`/`else` as one more `allOf` part: an `anyOf` of the two cases."""
    out = {k: v for k, v in node.items() if k not in ("if", "then", "else")}
    test = node["if"]
    cases = [{"allOf": [test, node.get("then", True)]}, {"allOf": [negate(test, resolve), node.get("else", True)]}]
    out["allOf"] = [*node.get("allOf", []), {"x-cases": cases}]
    return out


def negate(schema: Any, resolve: Resolve = _same, names: Collection[str] | None = None) -> Any:
    """A schema without `not` that holds exactly where `schema` fails (`resolve` follows references),
    among objects whose keys are all in `names` where it is given (a closed object's properties).
    A negation that would read more than `_MAX_STEPS` schemas (a recursive reference) is refused."""
    steps = 0

    def counted(part: Any) -> Any:
        nonlocal steps
        steps += 1
        if steps > _MAX_STEPS:
            raise Clash("'not' of a schema this large or recursive")
        return resolve(part)

    return _negate(schema, counted, names)


def _negate(schema: Any, resolve: Resolve, names: Collection[str] | None = None) -> Any:
    schema = resolve(schema)
    if schema is True or schema is False:
        return not schema
    if names is not None:
        if any(n not in names for n in schema.get("required", [])):
            return True  # it asks for a key these objects never have
        inside = {n: v for n, v in schema.get("properties", {}).items() if n in names}
        schema = {k: v for k, v in schema.items() if k != "properties"} | ({"properties": inside} if inside else {})
    keys = [k for k in schema if k in _KEYWORDS]
    if names is not None and schema.get("additionalProperties") is False and "patternProperties" not in schema:
        extra = sorted(set(names) - set(schema.get("properties", {})))
        keys.remove("additionalProperties")
        schema = {**schema, "x-extra": extra}
        keys.append("x-extra")
    elif schema.get("additionalProperties") is False and "patternProperties" not in schema:
        keys.remove("additionalProperties")  # some key it does not declare: the object's rewrite says which
        schema = {**schema, "x-outside": sorted(schema.get("properties", {}))}
        keys.append("x-outside")
    if not keys:
        return False
    if len(keys) > 1 or (keys == ["properties"] and len(schema["properties"]) > 1):
        return {"x-cases": [_negate(part, resolve) for part in _conjuncts(schema, keys)]}
    ((key, value),) = ((k, schema[k]) for k in keys)
    return _negate_one(key, value, resolve)


def _conjuncts(schema: Mapping[str, Any], keys: list[str]) -> list[Any]:
    """`schema` as parts that all hold exactly when it does: keywords that read each other
    (properties and extra keys, items and tuples, bounds and `contains`) stay together."""
    joined = [k for k in keys if k in ("additionalProperties", "patternProperties", "prefixItems", "contains")]
    if joined:
        raise Clash(f"'not' of a schema with '{joined[0]}'")
    parts: list[Any] = []
    for key in keys:
        if key == "properties":
            parts += [{"properties": {n: s}} for n, s in schema["properties"].items()]
        elif key == "required":
            parts += [{"required": [n]} for n in schema["required"]]
        else:
            parts.append({key: schema[key]})
    return parts


def _negate_one(key: str, value: Any, resolve: Resolve) -> Any:
    if key == "type":
        return _other_types(types_of({"type": value}) or frozenset())
    if key == "required":
        if len(value) != 1:
            return {"x-cases": [{"type": "object", "properties": {n: False}} for n in value]} if value else False
        return {"type": "object", "properties": {value[0]: False}}
    if key == "properties" and not value:
        return False
    if key == "properties":
        ((name, sub),) = value.items()
        return {"type": "object", "required": [name], "properties": {name: _negate(sub, resolve)}}
    if key == "anyOf" or (key == "oneOf" and len(value) == 1):
        return {"allOf": [_negate(part, resolve) for part in value]}
    if key == "oneOf" and len(value) <= _MAX_ONE_OF:  # none of them, or two at once
        pairs = [{"allOf": [a, b]} for i, a in enumerate(value) for b in value[i + 1 :]]
        return {"x-cases": [{"allOf": [_negate(part, resolve) for part in value]}, *pairs]}
    if key == "allOf":
        return {"x-cases": [_negate(part, resolve) for part in value]}
    if key == "not":
        return value
    if key == "x-extra":  # a key outside the declared ones: one of these present
        return {"x-cases": [{"type": "object", "required": [n]} for n in value]} if value else False
    if key == "items" and isinstance(value, Mapping | bool):  # some item fails it
        return {"type": "array", "contains": _negate(value, resolve)}
    if key == "x-outside":
        return {"type": "object", "x-outside": value}
    if key == "pattern":
        return {"type": "string", "x-antipatterns": [value]}
    if key in ("const", "enum"):
        return _other_values([value] if key == "const" else value)
    if key in _OPPOSITE:
        opposite, kind, shift = _OPPOSITE[key]
        bound = value + shift
        if bound < 0:
            return False
        return {"type": kind, opposite: bound}
    raise Clash(f"'not' of '{key}'")


def _other_types(kinds: frozenset[str]) -> Any:
    rest: list[Any] = [{"type": k} for k in _KINDS if k not in kinds and not (k == "number" and "integer" in kinds)]
    if "integer" in kinds and "number" not in kinds:  # numbers that are not whole
        rest.append({"type": "number", "x-fractional": True})
    return {"x-cases": rest} if rest else False


def _other_values(values: list[Any]) -> Any:
    """Any value but `values`: the other types, and the values' own types less these values
    (`x-except`, which the rewrite takes out of an `enum` or the booleans, and refuses elsewhere)."""
    kinds = {_kind(v) for v in values}
    rest: list[Any] = [{"type": k} for k in _KINDS if k not in kinds]
    rest += [{"type": k, "x-except": [v for v in values if _kind(v) == k]} for k in _KINDS if k in kinds]
    return {"x-cases": rest}


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    names: dict[type, str] = {str: "string", list: "array", dict: "object"}
    return names.get(type(value), "number")
