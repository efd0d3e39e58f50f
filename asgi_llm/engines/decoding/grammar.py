"""JSON Schemas the way llama.cpp's grammar converter enforces them. Pure: no `llama_cpp` here.

llama.cpp's converter (`json_schema_to_gbnf`) turns a schema into a grammar, but silently
drops what it does not understand (`minimum`, `pattern`, `not`, keywords beside a `$ref`...):
output would parse and still not validate. `enforceable` checks a schema, refuses what would
be dropped, and rewrites the rest into the forms the converter enforces exactly: references
inlined, combinators flattened into `anyOf`, and stricter where that is free (no extra object
keys, tuples of exactly their length). `harden` fixes two of the converter's own rules.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from jsonschema import Draft202012Validator  # type: ignore[import-untyped, unused-ignore]
from jsonschema.exceptions import SchemaError  # type: ignore[import-untyped, unused-ignore]
from jsonschema.protocols import Validator  # type: ignore[import-untyped, unused-ignore]
from jsonschema.validators import validator_for  # type: ignore[import-untyped, unused-ignore]

from ...core.errors import InternalError, InvalidRequest, Unsupported
from ...core.events import Finish, GenerationEvent, TextDelta
from ...core.requests import OutputFormat

__all__ = [
    "Schema",
    "as_rule",
    "check_schema",
    "checked_output",
    "enforceable",
    "harden",
    "literal_safe",
    "output_schema",
    "relax_space",
    "validator",
]

Schema = dict[str, Any]

_ANY_TYPES = ("object", "array", "string", "number", "boolean", "null")
_ANNOTATIONS = frozenset(
    {"title", "description", "examples", "default", "deprecated", "readOnly", "writeOnly", "$comment", "$schema"}
    | {"contentMediaType", "contentEncoding", "contentSchema"}
)
_UNENFORCEABLE = frozenset(
    {"not", "if", "then", "else", "pattern", "patternProperties", "propertyNames", "dependentRequired"}
    | {"dependentSchemas", "dependencies", "minProperties", "maxProperties", "contains", "minContains"}
    | {"maxContains", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}
    | {"$dynamicRef", "$dynamicAnchor", "$recursiveRef", "$recursiveAnchor", "$anchor"}
    | {"uniqueItems", "additionalItems", "unevaluatedItems", "unevaluatedProperties"}
)
_HARMLESS: dict[str, Any] = {
    "uniqueItems": False,
    "additionalItems": True,
    "unevaluatedItems": True,
    "unevaluatedProperties": True,
    "minProperties": 0,
}
_BY_TYPE = {
    "object": frozenset({"properties", "required", "additionalProperties"}),
    "array": frozenset({"items", "prefixItems", "minItems", "maxItems"}),
    "string": frozenset({"minLength", "maxLength", "format"}),
}
_STRUCTURE = frozenset({"type", "enum", "const", "$ref", "$defs", "definitions", "allOf", "anyOf", "oneOf", "$id"})
_KNOWN = _STRUCTURE | _UNENFORCEABLE | frozenset().union(*_BY_TYPE.values())
_RULED_FORMATS = frozenset({"date", "time", "date-time", "uuid", "uuid1", "uuid2", "uuid3", "uuid4", "uuid5"})
_MAX_DEPTH = 48
_MAX_NODES = 2000
_MAX_REPEAT = 256  # bounds above this unroll into grammars too large to be worth it


def _validator_class(schema: Mapping[str, Any]) -> Any:
    """The draft `$schema` names; 2020-12 when it names none this library knows."""
    if not isinstance(schema.get("$schema", ""), str):
        return Draft202012Validator
    return validator_for(schema, default=Draft202012Validator)


def check_schema(schema: Any, param: str) -> None:
    """`InvalidRequest` naming `param` unless `schema` is a valid JSON Schema object."""
    if not isinstance(schema, Mapping):
        raise InvalidRequest(f"'{param}' must be a JSON Schema object.", param=param)
    try:
        _validator_class(schema).check_schema(dict(schema))
    except SchemaError as exc:
        where = "/".join(str(p) for p in exc.path)
        at = f" at '{where}'" if where else ""
        raise InvalidRequest(f"'{param}' is not a valid JSON Schema{at}: {exc.message}", param=param) from None


def validator(schema: Mapping[str, Any]) -> Validator:
    """Checks values against a schema already passed by `check_schema`."""
    checker: Validator = _validator_class(schema)(schema)
    return checker


def output_schema(fmt: OutputFormat) -> tuple[Schema, Validator]:
    """The schema the output is decoded under, and the check it must pass when done."""
    if fmt.kind == "json_object":
        return {"type": "object"}, validator({"type": "object"})
    return enforceable(fmt.schema, fmt.param), validator(fmt.schema)


def enforceable(schema: Mapping[str, Any], param: str, *, root_type: str | None = None) -> Schema:
    """A copy of `schema` the converter enforces exactly; every value it allows is valid under `schema`.

    Raises `InvalidRequest` (an invalid schema) or `Unsupported` (a valid one that decoding
    cannot enforce), naming `param`. `root_type` demands a type at the root (tool arguments
    are objects).
    """
    check_schema(schema, param)
    if root_type is not None and schema.get("type", root_type) != root_type:
        raise Unsupported(f"'{param}' must describe a JSON {root_type}.", param=param)
    if root_type is not None and not {"type", "$ref", "anyOf", "oneOf", "allOf"} & schema.keys():
        schema = {**schema, "type": root_type}
    return _Rewrite(schema, param).node(schema, "", 0)


def harden(gbnf: str) -> str:
    """Fixes two rules of the converter's: JSON strings admitted raw control characters (JSON
    forbids them), and exponents of any length (`1e999` parses as infinity, which has no JSON)."""
    gbnf = gbnf.replace('char ::= [^"\\\\] |', 'char ::= [^"\\\\\\x7F\\x00-\\x1F] |')
    return gbnf.replace("[eE] [-+]? integral-part", "[eE] [-+]? [0-9] [0-9]?")


def as_rule(gbnf: str, name: str) -> str:
    """A converter grammar with its `root` rule renamed, to be used inside a larger grammar."""
    lines = gbnf.splitlines()
    renamed = [f"{name} ::= {line[len('root ::= ') :]}" if line.startswith("root ::= ") else line for line in lines]
    if renamed == lines:
        raise ValueError("the grammar has no root rule")
    return "\n".join(renamed)


def relax_space(gbnf: str) -> str:
    """Lets a converter grammar take pretty-printed JSON (newlines, a bounded indent), as models
    that chose to write a call themselves often do."""
    return gbnf.replace('space ::= " "?', 'space ::= | " " | "\\n" [ \\t]{0,20}')


def literal_safe(value: Any) -> bool:
    """Whether the converter writes `value` as a grammar literal correctly (it mis-escapes backslashes)."""
    return "\\" not in json.dumps(value, ensure_ascii=False)


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
            if key in merged and merged[key] != value:
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
        properties: Mapping[str, Any] = node.get("properties", {})
        required: list[str] = list(node.get("required", []))
        missing = [name for name in required if name not in properties]
        if missing:
            raise self.refuse(where, f"Required {missing} without 'properties' for them")
        unsafe = [name for name in properties if not literal_safe(name)]
        if unsafe:
            raise self.refuse(where, f"Property names {unsafe} with backslashes, quotes or control characters")
        extra = node.get("additionalProperties", True)
        if properties or extra is False or ("properties" in node and "additionalProperties" not in node):
            # Extra keys are left out: the converter could repeat a named key with another value,
            # and `"properties": {}` (how tools without arguments are declared) means no keys, not
            # any: an open object lets a model ramble on in made-up keys until its token limit.
            return {
                "type": "object",
                "properties": {
                    name: self.node(sub, f"{where}/properties/{name}", depth + 1) for name, sub in properties.items()
                },
                "required": required,
                "additionalProperties": False,
            }
        if extra is True:
            return {"type": "object"}
        return {"type": "object", "additionalProperties": self.node(extra, f"{where}/additionalProperties", depth + 1)}

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
        least, most = node.get("minLength"), node.get("maxLength")
        if fmt in _RULED_FORMATS:
            if least is not None or most is not None:
                raise self.refuse(where, f"A length limit on a '{fmt}' string")
            return {"type": "string", "format": fmt}
        self.bounds(least or 0, most, where, "Length")
        out: Schema = {"type": "string"}
        if least:
            out["minLength"] = least
        if most is not None:
            out["maxLength"] = most
        return out


def _any() -> Schema:
    return {"anyOf": [{"type": kind} for kind in _ANY_TYPES]}


def checked_output(events: Iterable[GenerationEvent | None], check: Validator) -> Iterator[GenerationEvent | None]:
    """One choice's events, passed on; a choice that ends on its own must have produced a valid document.

    One cut off by its token limit or a stop sequence is incomplete by the client's own
    choice, and goes unchecked. A document that does not validate is a bug, raised as such.
    """
    texts: list[str] = []
    for event in events:
        if isinstance(event, TextDelta):
            texts.append(event.text)
        elif isinstance(event, Finish) and event.reason == "stop" and event.stop_sequence is None:
            try:
                valid = check.is_valid(json.loads("".join(texts)))
            except ValueError:
                valid = False
            if not valid:
                raise InternalError("The model's output does not match the requested format.")
        yield event
