"""The keywords the schema rewrite adds to JSON Schema on its way, and their meaning in JSON
Schema again, for checking a value with `jsonschema` against a schema the rewrite has extended. Pure.

`negation` and `objects` turn what a client wrote into positive keywords that `merge` combines
like any other: `x-except` (values excluded), `x-antipatterns` (patterns a string must not
match), `x-cases` (the rewrite's own branches), `x-outside` (some key outside a set),
`x-fractional` (a number with a fraction); and `merge` joins several `pattern`s into a list.
`jsonschema` would ignore all of them, and take a value they exclude.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["as_json_schema"]

_SCHEMA_MAPS = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})
_VALUES = frozenset({"const", "enum", "default", "examples", "required", "dependentRequired"})


def as_json_schema(schema: Any) -> Any:
    """`schema` with the rewrite's own keywords, at any depth, in JSON Schema's words."""
    if not isinstance(schema, Mapping):
        return [as_json_schema(part) for part in schema] if isinstance(schema, list) else schema
    out: dict[str, Any] = {}
    also: list[Any] = []
    for key, value in schema.items():
        if key in _VALUES:
            out[key] = value
        elif key in _SCHEMA_MAPS and isinstance(value, Mapping):
            out[key] = {name: as_json_schema(sub) for name, sub in value.items()}
        elif key == "x-except":
            also.append({"not": {"enum": list(value)}})
        elif key == "x-antipatterns":
            also += [{"not": {"pattern": pattern}} for pattern in value]
        elif key == "x-fractional":
            also += [{"not": {"type": "integer"}}] if value else []
        elif key == "x-outside":
            also.append({"not": {"type": "object", "propertyNames": {"enum": list(value)}}})
        elif key == "x-cases":
            also.append({"anyOf": as_json_schema(value)})
        elif key == "pattern" and isinstance(value, list):
            also += [{"pattern": pattern} for pattern in value]
        else:
            out[key] = as_json_schema(value)
    if also:
        out["allOf"] = [*out.get("allOf", []), *also]
    return out
