"""Random JSON Schemas built from the applicators, for the converter's property tests (hypothesis)."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

CHECKS = settings(
    max_examples=60,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
Schema = dict[str, Any]
NAMES = ["a", "b", "c"]
LEAVES = st.sampled_from(
    [
        {"type": "integer", "minimum": 0, "maximum": 20},
        {"type": "string", "maxLength": 3},
        {"enum": ["x", "y", "z"]},
        {"type": "boolean"},
        {"type": ["string", "null"], "maxLength": 2},
        {"type": "string", "not": {"enum": ["a", "b"]}, "maxLength": 2},
        {"type": "string", "pattern": "^[ab]+$", "not": {"pattern": "a$"}},
        {"type": "integer", "not": {"minimum": 5}, "minimum": -3},
        {"type": "array", "items": {"enum": ["r", "g", "b"]}, "uniqueItems": True, "minItems": 1},
        {"type": "array", "prefixItems": [{"type": "boolean"}], "items": {"type": "null"}, "maxItems": 3},
        {"type": "array", "items": {"type": "integer", "maximum": 9}, "contains": {"minimum": 5}},
        {"type": "array", "items": {"type": "integer", "maximum": 9}, "contains": {"minimum": 5}, "maxContains": 1},
        {"type": "string", "maxLength": 70},
        {"type": "number", "minimum": -1.5, "maximum": 2.25},
        {"type": "integer", "multipleOf": 3, "minimum": -10, "maximum": 40},
        {"type": "string", "format": "date"},
        {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 3}, "uniqueItems": True},
        {
            "type": "object",
            "patternProperties": {"^x": {"type": "integer"}, "y$": {"type": "boolean"}},
            "additionalProperties": False,
        },
        {
            "type": "object",
            "propertyNames": {"pattern": "^[a-c]+$", "maxLength": 3},
            "additionalProperties": {"type": "null"},
            "maxProperties": 2,
        },
    ]
)


def objects(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Schema]:
    @st.composite
    def build(draw: st.DrawFn) -> Schema:
        properties = draw(st.dictionaries(st.sampled_from(NAMES), children, min_size=1, max_size=3))
        names = sorted(properties)
        out: Schema = {"type": "object", "properties": properties}
        out["required"] = draw(st.lists(st.sampled_from(names), unique=True, max_size=2))
        if draw(st.booleans()):
            out["additionalProperties"] = False
        extra = draw(st.sampled_from(["none", "dependent", "not", "if", "oneOf"]))
        a, b = names[0], names[-1]
        if extra == "dependent" and a != b:
            out["dependentRequired"] = {a: [b]}
        elif extra == "not":
            out["not"] = {"required": [a]}
        elif extra == "if":
            out |= {"if": {"required": [a]}, "then": {"required": [b]}, "else": {"properties": {b: {"type": "null"}}}}
        elif extra == "oneOf":
            out["oneOf"] = (
                [{"required": [a]}, {"required": [b]}] if a != b else [{"required": [a]}, {"maxProperties": 0}]
            )
        if draw(st.booleans()):
            del out["type"]  # its keywords then bind objects only: any other value passes them
        return out

    return build()


def containers(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Schema]:
    arrays = st.builds(lambda i: {"type": "array", "items": i, "maxItems": 3}, children)
    beside = st.sampled_from([{}, {}, {"type": "string"}, {"type": "integer"}, {"type": "object"}])
    unions = st.tuples(st.sampled_from(["anyOf", "oneOf"]), st.lists(children, min_size=2, max_size=3), beside).map(
        lambda parts: {parts[0]: parts[1], **parts[2]}  # a type beside the branches may rule some out
    )
    merged = st.lists(children, min_size=2, max_size=2).map(lambda parts: {"allOf": parts})
    return st.one_of(arrays, objects(children), unions, merged)


SCHEMAS = st.recursive(LEAVES, containers, max_leaves=5)
TREE: Schema = {
    "$defs": {
        "n": {
            "type": "object",
            "properties": {
                "v": {"type": "integer", "maximum": 9},
                "kids": {"type": "array", "items": {"$ref": "#/$defs/n"}},
            },
            "required": ["v"],
        }
    },
    "$ref": "#/$defs/n",
}
