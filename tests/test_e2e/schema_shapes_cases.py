"""The schemas of `test_schema_shapes.py`: one per keyword family the grammar enforces, and the
tool whose parameters recurse through a `oneOf`. Each is a document a client sends as it is."""

from __future__ import annotations

from typing import Any

TREE: dict[str, Any] = {
    "$defs": {
        "Node": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "maxLength": 12},
                "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}},
            },
            "required": ["name", "children"],
            "additionalProperties": False,
        }
    },
    "$ref": "#/$defs/Node",
}
PETS: dict[str, Any] = {
    "$defs": {
        "Cat": {
            "type": "object",
            "properties": {"kind": {"const": "cat"}, "lives": {"type": "integer", "minimum": 1, "maximum": 9}},
            "required": ["kind", "lives"],
            "additionalProperties": False,
        },
        "Dog": {
            "type": "object",
            "properties": {"kind": {"const": "dog"}, "barks": {"type": "boolean"}},
            "required": ["kind", "barks"],
            "additionalProperties": False,
        },
        "Fox": {
            "type": "object",
            "properties": {"kind": {"const": "fox"}},
            "required": ["kind"],
            "additionalProperties": False,
        },
    },
    "type": "object",
    "properties": {"pet": {"oneOf": [{"$ref": "#/$defs/Cat"}, {"$ref": "#/$defs/Dog"}, {"$ref": "#/$defs/Fox"}]}},
    "required": ["pet"],
    "additionalProperties": False,
}
IF_THEN_ELSE: dict[str, Any] = {
    "type": "object",
    "properties": {
        "kind": {"enum": ["adult", "child"]},
        "licence": {"type": "string", "maxLength": 10},
        "school": {"type": "string", "maxLength": 16},
    },
    "required": ["kind"],
    "additionalProperties": False,
    "if": {"properties": {"kind": {"const": "adult"}}},
    "then": {"required": ["licence"], "not": {"required": ["school"]}},
    "else": {"required": ["school"]},
}
DEPENDENT_REQUIRED: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 16},
        "card": {"type": "string", "pattern": "^[0-9]{4}$"},
        "billing": {"type": "string", "maxLength": 20},
    },
    "required": ["name"],
    "dependentRequired": {"card": ["billing"]},
    "additionalProperties": False,
}
NOT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "level": {"type": "integer", "minimum": 0, "not": {"minimum": 10}},
        "mode": {"enum": ["read", "write", "admin"], "not": {"const": "admin"}},
        "note": {"not": {"type": ["string", "object", "array", "number"]}},
    },
    "required": ["level", "mode", "note"],
    "not": {"required": ["debug"]},
}
TUPLE: dict[str, Any] = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object",
    "properties": {
        "row": {
            "type": "array",
            "items": [{"type": "string", "maxLength": 10}, {"type": "integer"}],
            "additionalItems": {"type": "boolean"},
            "minItems": 3,
            "maxItems": 5,
        }
    },
    "required": ["row"],
    "additionalProperties": False,
}
CONTAINS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "scores": {"type": "array", "items": {"type": "integer"}, "contains": {"minimum": 90}, "minContains": 2}
    },
    "required": ["scores"],
    "additionalProperties": False,
}
UNIQUE: dict[str, Any] = {
    "type": "object",
    "properties": {
        "colours": {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "uniqueItems": True, "minItems": 2},
        "flags": {"type": "array", "items": {"type": "boolean"}, "uniqueItems": True, "minItems": 2},
    },
    "required": ["colours", "flags"],
    "additionalProperties": False,
}
REQUIRED_ONLY: dict[str, Any] = {"type": "object", "required": ["id", "label"]}
HUGE_STRING: dict[str, Any] = {
    "type": "object",
    "properties": {"essay": {"type": "string", "minLength": 20, "maxLength": 100_000}},
    "required": ["essay"],
    "additionalProperties": False,
}
# A tool's parameters: a folder tree whose entries are files or folders, exclusive by their names.
TREE_TOOL: dict[str, Any] = {
    "type": "object",
    "properties": {"root": {"$ref": "#/$defs/Entry"}},
    "required": ["root"],
    "additionalProperties": False,
    "$defs": {
        "Entry": {
            "oneOf": [
                {
                    "type": "object",
                    "properties": {"file": {"type": "string", "maxLength": 16}},
                    "required": ["file"],
                    "additionalProperties": False,
                },
                {
                    "type": "object",
                    "properties": {
                        "folder": {"type": "string", "maxLength": 16},
                        "entries": {"type": "array", "items": {"$ref": "#/$defs/Entry"}, "maxItems": 3},
                    },
                    "required": ["folder", "entries"],
                    "additionalProperties": False,
                },
            ]
        }
    },
}
