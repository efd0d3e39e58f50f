"""Applicators and the keywords that read others, as the grammar enforces them: recursive
references, keywords beside `anyOf`/`oneOf`/`$ref`, `not`, `if`/`then`/`else`, dependencies,
tuples with more items, `contains`, `uniqueItems` on values, counts of any size. For each, the
grammar takes valid documents and refuses invalid ones, and from any point of a valid document
the shortest ending (what the closing watch writes at a tight budget) validates."""

from __future__ import annotations

from typing import Any

import pytest

from asgi_llm.engines.decoding.forms import Choice, Closed, Ref, Rewritten
from asgi_llm.engines.decoding.gbnf import parse
from asgi_llm.engines.decoding.grammar import enforceable
from asgi_llm.engines.decoding.recognizer import Position
from asgi_llm.engines.decoding.schema_gbnf import schema_gbnf

from .schema_checks import closes_from_every_prefix, grammar_for, takes_and_refuses, text

TREE = {
    "$defs": {
        "Node": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "maxLength": 8},
                "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}},
            },
            "required": ["name", "children"],
        }
    },
    "$ref": "#/$defs/Node",
}
PETS = {  # pydantic's discriminated union of three models
    "$defs": {
        "Cat": {"properties": {"kind": {"const": "cat"}, "lives": {"type": "integer"}}, "required": ["kind", "lives"]},
        "Dog": {"properties": {"kind": {"const": "dog"}, "bark": {"type": "boolean"}}, "required": ["kind", "bark"]},
        "Fox": {"properties": {"kind": {"const": "fox"}}, "required": ["kind"]},
    },
    "type": "object",
    "properties": {
        "pet": {
            "oneOf": [{"$ref": "#/$defs/Cat"}, {"$ref": "#/$defs/Dog"}, {"$ref": "#/$defs/Fox"}],
            "discriminator": {"propertyName": "kind"},
        }
    },
    "required": ["pet"],
}
CASES: list[tuple[str, dict[str, Any], list[Any], list[Any]]] = [
    (
        "recursive-tree",
        TREE,
        [{"name": "a", "children": []}, {"name": "a", "children": [{"name": "b", "children": []}]}],
        [{"name": "a"}, {"name": "a", "children": [{"name": "b"}]}],
    ),
    ("discriminated-union", PETS, [{"pet": {"kind": "cat", "lives": 9}}, {"pet": {"kind": "fox"}}], [{"pet": {}}]),
    (
        "sibling-type-drops-branch",
        {
            "type": "object",
            "oneOf": [{"type": "string"}, {"properties": {"a": {"type": "integer"}}, "required": ["a"]}],
        },
        [{"a": 1}],
        ["x", {}],
    ),
    (
        "required-beside-any-of",
        {
            "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
            "required": ["a"],
            "anyOf": [{"required": ["b"]}, {"properties": {"a": {"minimum": 5}}}],
        },
        [{"a": 1, "b": "x"}, {"a": 7}],
        [{"a": 1}],
    ),
    (
        "all-of-extra-keys",
        {"allOf": [{"properties": {"a": {"type": "integer"}}, "additionalProperties": {"type": "string"}}]}
        | {"properties": {"b": {"type": "string"}}, "required": ["b"]},
        [{"b": "x"}],
        [{"b": 1}],
    ),
    (
        "ref-with-siblings",
        {"$defs": {"P": {"type": "object", "properties": {"x": {"type": "integer"}}}}, "$ref": "#/$defs/P"}
        | {"required": ["x"]},
        [{"x": 1}],
        [{}],
    ),
    ("required-undeclared", {"type": "object", "required": ["id"]}, [{"id": 3}, {"id": "x"}], [{}]),
    (
        "dependent-required",
        {
            "properties": {"card": {"type": "string"}, "billing": {"type": "string"}},
            "dependentRequired": {"card": ["billing"]},
        },
        [{}, {"billing": "x"}, {"card": "1", "billing": "x"}],
        [{"card": "1"}],
    ),
    (
        "draft7-dependencies",
        {
            "$schema": "http://json-schema.org/draft-07/schema#",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}, "c": {"type": "integer"}},
            "dependencies": {"a": ["b"], "b": {"properties": {"c": {"maximum": 3}}, "required": ["c"]}},
        },
        [{}, {"c": 9}, {"b": 1, "c": 2}, {"a": 1, "b": 1, "c": 3}],
        [{"a": 1}, {"b": 1}, {"b": 1, "c": 4}],
    ),
    (
        "if-then-else-discriminator",
        {
            "properties": {"kind": {"enum": ["a", "b"]}, "n": {"type": "integer"}, "s": {"type": "string"}},
            "required": ["kind"],
            "if": {"properties": {"kind": {"const": "a"}}, "required": ["kind"]},
            "then": {"required": ["n"]},
            "else": {"required": ["s"]},
        },
        [{"kind": "a", "n": 1}, {"kind": "b", "s": "x"}],
        [{"kind": "a", "s": "x"}, {"kind": "b", "n": 1}],
    ),
    (
        "if-type",
        {"if": {"type": "string"}, "then": {"maxLength": 2}, "else": {"type": "integer"}},
        ["ab", 3],
        ["abc", 1.5],
    ),
    ("not-type", {"not": {"type": ["string", "object", "array"]}}, [1, None, True], ["x", {}, []]),
    (
        "not-required",
        {"properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "not": {"required": ["a"]}},
        [{}, {"b": 1}],
        [{"a": 1}],
    ),
    ("not-enum-within-enum", {"enum": ["x", "y", "z"], "not": {"enum": ["y"]}}, ["x", "z"], ["y"]),
    ("not-false", {"type": "boolean", "not": {"const": False}}, [True], [False]),
    ("not-bound", {"type": "integer", "not": {"minimum": 10}}, [9, -3], [10, 11]),
    (
        "additional-items",
        {"type": "array", "items": [{"type": "string"}], "additionalItems": {"type": "integer"}, "maxItems": 3}
        | {"$schema": "http://json-schema.org/draft-07/schema#"},
        [["a"], ["a", 1, 2]],
        [["a", "b"], [1], ["a", 1, 2, 3]],
    ),
    (
        "prefix-items-then-items",
        {"type": "array", "prefixItems": [{"type": "boolean"}], "items": {"type": "null"}, "minItems": 2},
        [[True, None], [False, None, None]],
        [[True], [None, None]],
    ),
    ("huge-max-length", {"type": "string", "maxLength": 70_000}, ["", "abc"], [1]),
    (
        "min-length-over-block",
        {"type": "string", "minLength": 40, "maxLength": 1000},
        ["a" * 40, "b" * 999],
        ["a" * 39],
    ),
    ("huge-max-items", {"type": "array", "items": {"type": "integer"}, "maxItems": 5000}, [[], [1, 2]], [["x"]]),
    (
        "exact-count",
        {"type": "array", "items": {"type": "boolean"}, "minItems": 35, "maxItems": 35},
        [[True] * 35],
        [[True] * 34, [True] * 36],
    ),
    (
        "unique-enum",
        {"type": "array", "items": {"enum": ["r", "g", "b"]}, "uniqueItems": True, "minItems": 1},
        [["r"], ["r", "g", "b"], ["g", "b"]],
        [[], ["r", "r"]],
    ),
    (
        "unique-small-integers",
        {"type": "array", "items": {"type": "integer", "minimum": 1, "exclusiveMaximum": 4}, "uniqueItems": True},
        [[], [1, 3], [1, 2, 3]],
        [[1, 1], [4], [1, 2, 3, 3]],
    ),
    (
        "unique-enum-at-least-two",
        {"type": "array", "items": {"enum": ["r", "g", "b"]}, "uniqueItems": True, "minItems": 2, "maxItems": 2},
        [["r", "g"], ["g", "b"], ["r", "b"]],
        [["b"], ["r"], ["r", "g", "b"]],
    ),
    (
        "unique-booleans",
        {"type": "array", "items": {"type": "boolean"}, "uniqueItems": True},
        [[], [False, True]],
        [[True, True]],
    ),
    (
        "contains",
        {"type": "array", "items": {"type": "integer"}, "contains": {"minimum": 10}},
        [[10], [1, 2, 30], [11, 1]],
        [[], [1, 2]],
    ),
    (
        "min-contains",
        {"type": "array", "contains": {"const": "x"}, "minContains": 2},
        [["x", "x"], ["x", 1, "x"]],
        [["x"], [1, "x"]],
    ),
    (
        "max-contains",
        {"type": "array", "items": {"type": "integer"}, "contains": {"minimum": 5}, "minContains": 1, "maxContains": 2},
        [[5], [1, 6, 2, 7], [9, 9, 0]],
        [[], [1], [5, 6, 7]],
    ),
    (
        "at-most-by-contains",
        {
            "type": "array",
            "items": {"enum": ["a", "b"]},
            "contains": {"const": "a"},
            "minContains": 0,
            "maxContains": 1,
        },
        [[], ["b", "b"], ["b", "a"]],
        [["a", "a"], ["a", "b", "a"]],
    ),
    (
        "one-of-with-required-beside-max-properties",
        {
            "allOf": [
                {
                    "type": "object",
                    "properties": {"a": {"type": "integer"}},
                    "oneOf": [{"required": ["a"]}, {"maxProperties": 0}],
                },
                {"type": "object", "properties": {"b": {"type": "integer"}}, "required": ["b"]},
            ]
        },
        [{"a": 1, "b": 0}],
        [{"b": 0}, {}],
    ),
    ("property-names-false", {"type": "object", "propertyNames": False}, [{}], [{"a": 1}]),
    (
        "one-of-required-names",
        {
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "oneOf": [{"required": ["a"]}, {"required": ["b"]}],
        },
        [{"a": 1}, {"b": 2}],
        [{"a": 1, "b": 2}, {}],
    ),
    ("one-of-overlapping-bounds", {"type": "integer", "oneOf": [{"maximum": 2}, {"maximum": 5}]}, [3, 5], [1, 2, 6]),
    (
        "one-of-apart-strings",
        {"type": "string", "oneOf": [{"format": "date"}, {"maxLength": 2}]},
        ["ab", "2024-01-02"],
        [],
    ),
    ("one-of-patterns", {"type": "string", "oneOf": [{"pattern": "^a"}, {"pattern": "b$"}]}, ["a", "xb"], ["ab", "x"]),
    ("not-string-values", {"type": "string", "not": {"enum": ["x", "yz"]}}, ["", "y", "xx"], ["x", "yz"]),
    (
        "not-its-own-pattern-in-a-branch",
        {"anyOf": [{"type": "string", "pattern": "^a", "not": {"pattern": "^a"}}, {"type": "integer"}]},
        [1],
        ["a", "b"],
    ),
    ("not-pattern", {"type": "string", "not": {"pattern": "^a"}}, ["", "ba"], ["a", "ab"]),
    (
        "one-of-closed-objects",
        {
            "oneOf": [
                {"properties": {"and": {"type": "integer"}}, "additionalProperties": False},
                {"properties": {"or": {"type": "integer"}}, "additionalProperties": False},
            ]
        },
        [{"and": 1}, {"or": 2}],
        [{}, {"and": 1, "or": 2}],
    ),
    (
        "not-one-of",
        {"type": "integer", "minimum": 0, "maximum": 9, "not": {"oneOf": [{"maximum": 3}, {"minimum": 2}]}},
        [2, 3],
        [0, 1, 4, 9],
    ),
    ("one-of-integer-or-number", {"oneOf": [{"type": "integer"}, {"type": "number"}]}, [0.5, -2.25], [1, 0, 3.0]),
    ("not-integer", {"type": "number", "maximum": 3, "not": {"type": "integer"}}, [2.5, -0.5], [2, 3.5]),
    (
        "one-of-untyped-object-or-array",
        {
            "oneOf": [
                {"properties": {"name": {"type": "string"}}, "required": ["name"], "additionalProperties": False},
                {"type": "array", "items": {"type": "integer"}},
            ]
        },
        [{"name": "x"}],
        [[1], [], {}],
    ),
    (
        "several-pattern-properties",
        {
            "type": "object",
            "patternProperties": {"^x-": {"type": "integer"}, "-n$": {"type": "integer", "minimum": 5}},
            "additionalProperties": False,
            "maxProperties": 2,
        },
        [{}, {"x-a": 1}, {"x-n": 7, "b-n": 5}],
        [{"x-n": 1}, {"b-n": 2}, {"y": 1}, {"x-a": "s"}],
    ),
    (
        "not-items-vendor-keys",
        {"type": "array", "not": {"items": {"type": "string"}, "x-vendor": 1, "name": "texts"}},
        [[1], ["a", None]],
        [[], ["a", "b"]],
    ),
    (
        "optional-unsatisfiable-property-left-out",
        {"type": "object", "properties": {"a": {"type": "integer", "enum": ["x"]}, "b": {"type": "string"}}},
        [{}, {"b": "x"}],
        [{"a": "x"}],
    ),
    (  # two patterns a key may match at once, of types no value has: only that kind of key goes
        "pattern-properties-one-kind-of-key-impossible",
        {
            "type": "object",
            "patternProperties": {"^x": {"type": "integer"}, "y$": {"type": "boolean"}},
            "additionalProperties": False,
        },
        [{}, {"x": 1}, {"y": True}, {"xa": 1, "by": False}],
        [{"xy": 1}, {"xy": True}, {"a": 1}],
    ),
    (  # each part's `then` stays with its own `if`
        "all-of-two-conditionals-with-the-same-if",
        {
            "allOf": [
                {"properties": {"a": {"type": "integer"}}, "if": {"required": ["a"]}, "else": {"maxProperties": 0}},
                {"if": {"required": ["a"]}, "then": {"required": ["b"]}, "else": {"properties": {"b": False}}},
            ]
        },
        [{}, {"a": 1, "b": 2}],
        [{"b": 2}, {"a": 1}],
    ),
    (  # an `enum` the negations narrow is checked with their keywords too
        "one-of-strings-excluded-and-antipatterns",
        {
            "oneOf": [
                {"type": "string", "not": {"enum": ["a", "b"]}, "maxLength": 2},
                {"type": "string", "pattern": "^[ab]+$", "not": {"pattern": "a$"}},
            ]
        },
        ["b", "c", "aab"],
        ["a", "ab", "bb"],
    ),
    (  # the names an enum allows take their pattern's schema (no other key)
        "property-names-enum-beside-pattern-properties",
        {
            "type": "object",
            "propertyNames": {"enum": ["p10", "p300"]},
            "patternProperties": {".*": {"type": "number"}},
            "additionalProperties": False,
        },
        [{}, {"p10": 1.5}, {"p10": 1, "p300": 2}],
        [{"x": 1}, {"p10": "a"}],
    ),
    (  # every document of the first requires a key the second's closed object does not allow
        "one-of-closed-objects-one-requiring-what-the-other-refuses",
        {
            "oneOf": [
                {
                    "type": "object",
                    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                    "required": ["a", "b"],
                    "additionalProperties": False,
                },
                {"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": False},
            ]
        },
        [{"a": 1, "b": 2}, {"a": 1}, {}],
        [{"b": 1}, {"a": "x"}],
    ),
    (  # the first branch meets the rest of the schema nowhere: it meets no other branch either
        "one-of-with-a-branch-the-rest-of-the-schema-rules-out",
        {"type": "string", "oneOf": [{"type": "integer"}, {"maxLength": 2}, {"minLength": 5}]},
        ["ab", "abcdef"],
        ["abc", 1],
    ),
    (  # the second branch takes any integer (its keywords bind objects only)
        "one-of-against-a-branch-only-the-rewrite-found-empty",
        {"oneOf": [{"type": "integer"}, {"properties": {"a": {"oneOf": [{"type": "null"}, {"type": "null"}]}}}]},
        [{}],
        [0, {"a": None}],
    ),
    (
        "one-of-whose-narrowed-branch-writes-more",
        {
            "oneOf": [
                {"type": "integer", "minimum": 0, "maximum": 20},
                {"type": "object", "properties": {"a": {"type": "integer"}}},
                {"properties": {"a": {"type": "integer"}}},
            ]
        },
        ["s", None, True, [], -1, 21, 1.5],
        [0, 20, {}, {"a": 1}],
    ),
]


@pytest.mark.parametrize(("schema", "good", "bad"), [pytest.param(*c[1:], id=c[0]) for c in CASES])
def test_the_grammar_takes_valid_documents_and_refuses_invalid_ones(
    schema: dict[str, Any], good: list[Any], bad: list[Any]
) -> None:
    takes_and_refuses(schema, good, bad)


@pytest.mark.parametrize(("schema", "good", "bad"), [pytest.param(*c[1:], id=c[0]) for c in CASES])
def test_every_prefix_of_a_valid_document_closes_validly(
    schema: dict[str, Any], good: list[Any], bad: list[Any]
) -> None:
    """What the closing watch does at any budget: from any point of the output, the shortest ending validates."""
    closes_from_every_prefix(schema, good[-1], cuts=60)


def test_a_one_of_whose_branches_may_meet_is_refused_not_loosened() -> None:
    from asgi_llm.core import Unsupported

    with pytest.raises(Unsupported, match="oneOf"):
        enforceable({"type": "string", "oneOf": [{"format": "date"}, {"pattern": "^2"}]}, "format")


def test_a_huge_bound_makes_a_small_grammar() -> None:
    small = schema_gbnf(enforceable({"type": "string", "maxLength": 40}, "s"))
    huge = schema_gbnf(enforceable({"type": "string", "maxLength": 1_000_000}, "s"))
    assert len(huge.splitlines()) < len(small.splitlines()) + 16


def test_two_tools_with_the_same_recursive_definition_get_rules_of_their_own() -> None:
    one, two = enforceable(TREE, "tools[0]"), enforceable(TREE, "tools[1]")
    assert isinstance(one.root, Ref) and isinstance(two.root, Ref) and one.root != two.root
    both = Rewritten.around(Choice((one.root, two.root)), [one, two])
    assert set(both.defs) == {one.root.name, two.root.name}
    assert _grammar_text_ok(schema_gbnf(both))


def _grammar_text_ok(text: str) -> bool:
    parse(text)
    return True


def test_a_negation_through_a_recursive_reference_is_refused_not_followed_for_ever() -> None:
    from asgi_llm.core import Unsupported

    node = {"type": "object", "properties": {"a": {"$ref": "#/$defs/n"}, "b": {"type": "string"}}}
    other = {"type": "object", "properties": {"a": {}}, "required": ["b"]}
    schema = {"$defs": {"n": node}, "oneOf": [{"$ref": "#/$defs/n"}, other]}
    with pytest.raises(Unsupported, match="recursive"):
        enforceable(schema, "format")


def test_a_pattern_with_a_long_length_bound_is_written_at_most_256_characters_long() -> None:
    schema = {"type": "string", "pattern": "^[a-z]+$", "maxLength": 5000}
    grammar = grammar_for(schema)
    assert Position(grammar).advance(text("a" * 256)).complete
    assert not Position(grammar).advance(text("a" * 257)).complete  # valid, but past what the grammar unrolls
    closes_from_every_prefix(schema, "abc")


def test_what_is_left_out_is_said_in_the_log(caplog: pytest.LogCaptureFixture) -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer", "enum": ["x"]}, "k": {"type": "string"}}}
    with caplog.at_level("WARNING", logger="asgi_llm.engine"):
        out = enforceable(schema, "format")
    assert isinstance(out.root, Closed) and list(out.root.declared) == ["k"]
    said = [r.getMessage() for r in caplog.records if r.name == "asgi_llm.engine"]
    assert any("/properties/n" in m and "left out" in m for m in said), said


def test_the_string_automata_one_schema_needs_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each negation a pattern meets makes another automaton; past the bound the schema is refused by name."""
    from asgi_llm.core import Unsupported
    from asgi_llm.engines.decoding import rewrite

    monkeypatch.setattr(rewrite, "_MAX_AUTOMATA", 3)
    patterns = {f"p{i}": {"type": "string", "pattern": f"^{chr(97 + i)}+$"} for i in range(3)}
    enforceable({"type": "object", "properties": patterns}, "s")  # three automata: within the bound
    more = {**patterns, "p3": {"type": "string", "pattern": "^d+$"}}
    with pytest.raises(Unsupported, match="more than 3 string automata") as refused:
        enforceable({"type": "object", "properties": more}, "s")
    assert "/properties/p3" in refused.value.message
