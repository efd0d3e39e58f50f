"""A JSON Schema rewritten into the forms `schema_gbnf` turns into a grammar exactly. Pure.

One walk over the schema: references inlined, combinators flattened into `anyOf`, `enum`
values kept where the rest allows them, and stricter where that is free (no extra object
keys beside declared ones, tuples of exactly their length). Bounds, patterns, formats and
key rules are kept for the grammar; each is tried on its own automaton here, so what cannot be
held is a 400 naming it before any token. What no grammar can hold is refused: `uniqueItems`,
`not`, `if`/`then`/`else`, `contains`, dependencies and the like.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from ...core.errors import InvalidRequest, Unsupported
from .automata import Dfa, compile_pattern, intersect, with_length
from .checks import checked_formats, validator
from .formats import FORMATS
from .numbers import number_dfa
from .pattern import PatternError

__all__ = ["Schema", "literal_safe", "rewrite", "string_dfa"]

Schema = dict[str, Any]

_ANY_TYPES = ("object", "array", "string", "number", "boolean", "null")
_ANNOTATIONS = frozenset(
    {"title", "description", "examples", "default", "deprecated", "readOnly", "writeOnly", "$comment", "$schema"}
    | {"contentMediaType", "contentEncoding", "contentSchema"}
)
_UNENFORCEABLE = frozenset(
    {"not", "if", "then", "else", "dependentRequired", "dependentSchemas", "dependencies", "contains"}
    | {"minContains", "maxContains", "$dynamicRef", "$dynamicAnchor", "$recursiveRef", "$recursiveAnchor"}
    | {"$anchor", "uniqueItems", "additionalItems", "unevaluatedItems", "unevaluatedProperties"}
)
_HARMLESS: dict[str, Any] = {
    "uniqueItems": False,
    "additionalItems": True,
    "unevaluatedItems": True,
    "unevaluatedProperties": True,
}
_BY_TYPE = {
    "object": frozenset({"properties", "required", "additionalProperties", "patternProperties", "propertyNames"})
    | {"minProperties", "maxProperties"},
    "array": frozenset({"items", "prefixItems", "minItems", "maxItems"}),
    "string": frozenset({"minLength", "maxLength", "format", "pattern"}),
    "number": frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}),
}
_STRUCTURE = frozenset({"type", "enum", "const", "$ref", "$defs", "definitions", "allOf", "anyOf", "oneOf", "$id"})
_KNOWN = _STRUCTURE | _UNENFORCEABLE | frozenset().union(*_BY_TYPE.values())
_TIGHTEST: dict[str, Callable[[Any, Any], Any]] = {
    **dict.fromkeys(("minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties"), max),
    **dict.fromkeys(("maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties"), min),
}
_MAX_DEPTH = 48
_MAX_NODES = 2000
_MAX_REPEAT = 256  # bounds above this unroll into grammars too large to be worth it


def literal_safe(value: Any) -> bool:
    """Whether a value is written as a grammar literal as it is (no backslashes to escape)."""
    return "\\" not in json.dumps(value, ensure_ascii=False)


def rewrite(schema: Mapping[str, Any], param: str) -> Schema:
    """`schema` (checked already) in the forms the grammar is built from."""
    return _Rewrite(schema, param).node(schema, "", 0)


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


def _merge(parts: list[Any], where: str, param: str) -> Schema:
    """All of `parts` at once, as one schema, when no keyword appears twice with different values."""
    merged: Schema = {}
    for part in parts:
        if part is True:
            continue
        if part is False or not isinstance(part, Mapping):
            raise Unsupported(f"The schema at '{where or '/'}' in '{param}' admits no value.", param=param)
        for key, value in part.items():
            if key in _ANNOTATIONS:
                continue
            if key in merged and key in _TIGHTEST and merged[key] != value:
                value = _TIGHTEST[key](merged[key], value)
            elif key == "pattern" and key in merged and merged[key] != value:
                value = [*(merged[key] if isinstance(merged[key], list) else [merged[key]]), value]
            elif key in merged and merged[key] != value:
                raise Unsupported(
                    f"'{key}' is combined from several places at '{where or '/'}' in '{param}'; "
                    "this cannot be enforced while decoding.",
                    param=param,
                )
            merged[key] = value
    return merged


class _Rewrite:
    """One walk over a schema, node by node; `where` is the JSON path used in messages."""

    def __init__(self, root: Mapping[str, Any], param: str) -> None:
        self.root = root
        self.param = param
        self.resolving: set[str] = set()
        self.count = 0

    def refuse(self, where: str, what: str) -> Unsupported:
        return Unsupported(
            f"{what} at '{where or '/'}' in '{self.param}' cannot be enforced while decoding.", param=self.param
        )

    def node(self, schema: Any, where: str, depth: int) -> Schema:
        if schema is True:
            return _any()
        if schema is False:
            raise self.refuse(where, "A `false` schema")
        self.count += 1
        if depth > _MAX_DEPTH or self.count > _MAX_NODES:
            raise self.refuse(where, "A schema this deep or this large")
        node = {k: v for k, v in schema.items() if k in _KNOWN}
        for key in sorted(_UNENFORCEABLE & node.keys()):
            if key not in _HARMLESS or node[key] != _HARMLESS[key]:
                raise self.refuse(where, f"'{key}'")
            del node[key]
        if "$id" in node and depth > 0:
            raise self.refuse(where, "A nested '$id'")
        for key in ("$id", "$defs", "definitions"):  # references are inlined, definitions go
            node.pop(key, None)
        return self.shape(node, where, depth)

    def shape(self, node: Schema, where: str, depth: int) -> Schema:
        if "$ref" in node:
            return self.ref(node, where, depth)
        if "allOf" in node:
            parts = node.pop("allOf")
            return self.node(_merge([node, *parts], where, self.param), where, depth + 1)
        if "anyOf" in node or "oneOf" in node:
            return self.union(node, where, depth)
        if "enum" in node or "const" in node:
            return self.values(node, where)
        kind = node.get("type")
        if isinstance(kind, list):
            rest = {k: v for k, v in node.items() if k != "type"}
            return {"anyOf": [self.node({**rest, "type": t}, where, depth + 1) for t in dict.fromkeys(kind)]}
        kind = kind if kind is not None else self.infer(node, where)
        if kind == "object":
            return self.object(node, where, depth)
        if kind == "array":
            return self.array(node, where, depth)
        if kind == "string":
            return self.string(node, where)
        if kind in ("integer", "number"):
            return self.number(node, kind, where)
        return _any() if kind is None else {"type": kind}

    def ref(self, node: Schema, where: str, depth: int) -> Schema:
        """A local reference, inlined: the converter mixes up definitions that share a name."""
        ref = node.pop("$ref")
        if not ref.startswith("#"):
            raise self.refuse(where, f"The reference '{ref}' (only '#/...' references are)")
        if ref in self.resolving:
            raise self.refuse(where, f"The recursive reference '{ref}'")
        target = self.pointer(ref, where)
        self.resolving.add(ref)
        try:
            return self.node(_merge([node, target], where, self.param), ref[1:], depth + 1)
        finally:
            self.resolving.discard(ref)

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

    def union(self, node: Schema, where: str, depth: int) -> Schema:
        if "anyOf" in node and "oneOf" in node:
            raise self.refuse(where, "'anyOf' beside 'oneOf'")
        key = "anyOf" if "anyOf" in node else "oneOf"
        options = node.pop(key)
        alternatives = [
            self.node(_merge([node, option], f"{where}/{key}/{i}", self.param), f"{where}/{key}/{i}", depth + 1)
            for i, option in enumerate(options)
            if option is not False
        ]
        if not alternatives:
            raise self.refuse(where, f"An '{key}' of `false` schemas")
        return {"anyOf": alternatives}

    def values(self, node: Schema, where: str) -> Schema:
        """`enum` and `const`, keeping only the values the rest of the schema allows."""
        rest = {k: v for k, v in node.items() if k not in ("enum", "const")}
        values = [node["const"]] if "const" in node else list(node["enum"])
        if "const" in node and "enum" in node:
            values = [v for v in values if v in node["enum"]]
        try:
            check = validator(rest)
            kept = [v for v in values if check.is_valid(v)]
        except Exception:  # noqa: BLE001 (a reference inside `rest` cannot be followed on its own)
            raise self.refuse(where, "'enum' beside references") from None
        if not kept:
            raise InvalidRequest(f"No value allowed at '{where or '/'}' in '{self.param}'.", param=self.param)
        if not all(literal_safe(v) for v in kept):
            raise self.refuse(where, "A value with backslashes, quotes or control characters")
        return {"const": kept[0]} if len(kept) == 1 else {"enum": kept}

    def infer(self, node: Schema, where: str) -> str | None:
        kinds = [kind for kind, keywords in _BY_TYPE.items() if keywords & node.keys()]
        if len(kinds) > 1:
            raise self.refuse(where, f"Keywords of several types ({', '.join(kinds)}) without a 'type'")
        return kinds[0] if kinds else None

    def object(self, node: Schema, where: str, depth: int) -> Schema:
        properties: dict[str, Any] = dict(node.get("properties", {}))
        required: list[str] = list(node.get("required", []))
        patterns: Mapping[str, Any] = node.get("patternProperties", {})
        extra = node.get("additionalProperties", True)
        keys = self.key_rule(node.get("propertyNames", True), where)
        if isinstance(keys, list):  # names from an enum: declared properties, of the extra keys' schema
            properties = {
                name: properties.get(name, extra) for name in keys if properties.get(name, extra) is not False
            }
            extra = False
        missing = [name for name in required if name not in properties]
        if missing:
            raise self.refuse(where, f"Required {missing} without 'properties' for them")
        unsafe = [name for name in properties if not literal_safe(name)]
        if unsafe:
            raise self.refuse(where, f"Property names {unsafe} with backslashes, quotes or control characters")
        least, most = node.get("minProperties", 0), node.get("maxProperties")
        self.bounds(least, most, where, "Properties")
        bounds = {k: v for k, v in (("minProperties", least), ("maxProperties", most)) if v}
        bounds |= {"maxProperties": most} if most is not None else {}
        closed = extra is False and not patterns
        if properties or closed or ("properties" in node and "additionalProperties" not in node):
            # Extra keys are left out: `"properties": {}` (how tools without arguments are declared)
            # means no keys, not any: an open object lets a model ramble on in made-up keys.
            if least > len(properties):
                raise InvalidRequest(f"No value allowed at '{where or '/'}' in '{self.param}'.", param=self.param)
            subs = {}
            for name, sub in properties.items():
                if isinstance(keys, dict) and not validator(keys).is_valid(name):
                    if name in required:
                        raise InvalidRequest(f"'{name}' breaks 'propertyNames' at '{where or '/'}'.", param=self.param)
                    continue
                matched = [s for p, s in patterns.items() if re.search(p, name)]
                merged = _merge([sub, *matched], where, self.param) if matched else sub
                subs[name] = self.node(merged, f"{where}/properties/{name}", depth + 1)
            shut = {"type": "object", "properties": subs, "required": required, "additionalProperties": False}
            return {**shut, **bounds}
        if len(patterns) > 1:
            raise self.refuse(where, "Several 'patternProperties' on an object without declared properties")
        if least > 1:
            raise self.refuse(where, "'minProperties' above 1 on an object with free keys (keys may repeat)")
        if patterns:
            ((pattern, extra),) = patterns.items()
            base = keys if isinstance(keys, dict) else {"type": "string"}
            keys = {**base, "x-patterns": [*base.get("x-patterns", []), pattern]}
            self.try_dfa(keys, where, "patternProperties")
        if extra is False:
            return {"type": "object", "properties": {}, "required": [], "additionalProperties": False}
        if extra is True and keys is None and not bounds:
            return {"type": "object"}
        value = self.node(extra, f"{where}/additionalProperties", depth + 1)
        return {"type": "object", "additionalProperties": value, **({"x-keys": keys} if keys else {}), **bounds}

    def key_rule(self, names: Any, where: str) -> Schema | list[str] | None:
        """`propertyNames` as a rewritten string schema, or the list of names it allows; None for any name."""
        if names is True or names == {}:
            return None
        rule = self.node(names, f"{where}/propertyNames", 0)
        if "enum" in rule or "const" in rule:
            values = rule.get("enum", [rule.get("const")])
            return [v for v in values if isinstance(v, str)]
        if rule.get("type") != "string":
            raise self.refuse(where, "'propertyNames' other than a string schema or an enum")
        return rule

    def array(self, node: Schema, where: str, depth: int) -> Schema:
        items, prefix = node.get("items"), node.get("prefixItems")
        least, most = node.get("minItems", 0), node.get("maxItems")
        self.bounds(least, most, where, "Items")
        if prefix is None and isinstance(items, list):
            prefix, items = items, None  # draft 7 tuples
        if prefix is not None:
            if items not in (None, False) or not least <= len(prefix) <= (most if most is not None else len(prefix)):
                raise self.refuse(where, "A tuple with room for other lengths")
            subs = [self.node(s, f"{where}/prefixItems/{i}", depth + 1) for i, s in enumerate(prefix)]
            return {"type": "array", "prefixItems": subs}
        if items is False:
            if least:
                raise self.refuse(where, "'minItems' with no items allowed")
            most = 0
        element = self.node(True if items in (None, False) else items, f"{where}/items", depth + 1)
        out: Schema = {"type": "array", "items": element, "minItems": least}
        if most is not None:
            out["maxItems"] = most
        return out

    def bounds(self, least: int, most: int | None, where: str, what: str) -> None:
        if most is not None and least > most:
            raise InvalidRequest(f"No value allowed at '{where or '/'}' in '{self.param}'.", param=self.param)
        if max(least, most or 0) > _MAX_REPEAT:
            raise self.refuse(where, f"'min{what}'/'max{what}' above {_MAX_REPEAT}")

    def string(self, node: Schema, where: str) -> Schema:
        fmt = node.get("format")
        least, most = node.get("minLength", 0), node.get("maxLength")
        self.bounds(least, most, where, "Length")
        out: Schema = {"type": "string"}
        if fmt in FORMATS:
            out["format"] = fmt
        elif fmt is not None and fmt in checked_formats(self.root):
            raise self.refuse(where, f"The format '{fmt}'")
        pattern = node.get("pattern", [])
        if pattern:
            out["x-patterns"] = pattern if isinstance(pattern, list) else [pattern]
        if least:
            out["minLength"] = least
        if most is not None:
            out["maxLength"] = most
        if "format" in out or pattern:
            self.try_dfa(out, where, "pattern" if pattern else "format")
        return out

    def try_dfa(self, node: Schema, where: str, keyword: str) -> None:
        try:
            dfa = string_dfa(node)
        except PatternError as exc:
            raise self.refuse(where, f"'{keyword}' ({exc})") from None
        if dfa is not None and dfa.empty:
            raise self.refuse(where, f"'{keyword}' with these lengths (no string allowed the grammar can write)")

    def number(self, node: Schema, kind: str, where: str) -> Schema:
        out = {k: v for k, v in node.items() if k in _BY_TYPE["number"]}
        out["type"] = kind
        try:
            number_dfa(out)
        except PatternError as exc:
            keyword = "multipleOf" if "multipleOf" in str(exc) else "the bounds"
            raise self.refuse(where, f"{keyword} ({exc})") from None
        return out


def _any() -> Schema:
    return {"anyOf": [{"type": kind} for kind in _ANY_TYPES]}
