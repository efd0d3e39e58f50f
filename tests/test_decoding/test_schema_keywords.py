"""Each JSON Schema keyword the grammar enforces: the generated grammar takes valid documents and
refuses invalid ones, and its shortest document (what the closing watch writes when the budget
runs out) validates with jsonschema, formats checked."""

from __future__ import annotations

from typing import Any

import pytest

from .schema_checks import closes_from_every_prefix, takes_and_refuses

CASES: list[tuple[str, dict[str, Any], list[Any], list[Any]]] = [
    ("minimum-maximum", {"type": "integer", "minimum": 5, "maximum": 123}, [5, 99, 123], [4, 124, -5, 1000]),
    ("exclusive-int", {"type": "integer", "exclusiveMinimum": -3, "exclusiveMaximum": 3.5}, [-2, 0, 3], [-3, 4]),
    ("number-range", {"type": "number", "minimum": 0.5, "maximum": 2.25}, [0.5, 1, 2.25, 1.75], [0.49, 2.26, -1]),
    ("number-exclusive", {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1}, [0.5, 0.999], [0, 1, 1.5]),
    ("negative-range", {"type": "number", "minimum": -3, "maximum": -0.25}, [-3, -0.25, -1.5], [-0.2, -3.01, 0]),
    ("multiple-of", {"type": "integer", "multipleOf": 7, "minimum": 0, "maximum": 50}, [0, 7, 49], [1, 50, 56]),
    ("pattern", {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{2}$"}, ["ABC-12"], ["AB-12", "ABC-123", "abc-12"]),
    ("unanchored-pattern", {"type": "string", "pattern": "ab+c"}, ["xxabbc", "abc"], ["ac", "abx"]),
    ("pattern-groups", {"type": "string", "pattern": "^(?:a|bc)+(x)?$"}, ["abc", "bcax"], ["", "b", "ax7"]),
    ("pattern-quote", {"type": "string", "pattern": '^a"b\\\\$'}, ['a"b\\'], ["ab"]),
    (
        "pattern-length",
        {"type": "string", "pattern": "^[a-z]+$", "minLength": 2, "maxLength": 4},
        ["ab"],
        ["a", "abcde"],
    ),
    ("min-max-length", {"type": "string", "minLength": 1, "maxLength": 3}, ["a", "abc"], ["", "abcd"]),
    ("date", {"type": "string", "format": "date"}, ["2024-02-28", "1999-12-31"], ["2024-13-01", "24-01-01"]),
    ("time", {"type": "string", "format": "time"}, ["12:30:00Z", "23:59:59.5+02:00"], ["24:00:00Z", "12:30"]),
    ("date-time", {"type": "string", "format": "date-time"}, ["2024-01-02T03:04:05Z"], ["2024-01-02 03:04:05"]),
    ("duration", {"type": "string", "format": "duration"}, ["P1D", "PT2H30M", "P3W"], ["P", "1D", "PT"]),
    ("email", {"type": "string", "format": "email"}, ["ann@example.org"], ["ann", "@x.org", "a@b"]),
    ("hostname", {"type": "string", "format": "hostname"}, ["example.com", "a"], ["-a", "a..b", "a_b"]),
    ("ipv4", {"type": "string", "format": "ipv4"}, ["10.0.0.255"], ["256.1.1.1", "01.2.3.4", "1.2.3"]),
    ("ipv6", {"type": "string", "format": "ipv6"}, ["::", "fe80::1", "1:2:3:4:5:6:7:8"], ["1:2", ":::"]),
    ("uuid", {"type": "string", "format": "uuid"}, ["123e4567-e89b-42d3-a456-426614174000"], ["123e4567"]),
    ("regex", {"type": "string", "format": "regex"}, ["^a.b$", "", "v1/x"], ["a(b", "[a", "a\\d"]),
    ("uri", {"type": "string", "format": "uri"}, ["https://example.com/a/b", "http://x:8080"], ["example.com"]),
    (
        "min-max-items",
        {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 2},
        [[1], [1, 2]],
        [[], [1, 2, 3]],
    ),
    (
        "min-max-properties",
        {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {}, "c": {}},
            "minProperties": 1,
            "maxProperties": 2,
        },
        [{"a": 1}, {"b": 1, "c": 2}],
        [{}, {"a": 1, "b": 2, "c": 3}],
    ),
    (
        "pattern-properties",
        {"type": "object", "patternProperties": {"^x-[a-z]+$": {"type": "integer"}}, "additionalProperties": False},
        [{}, {"x-ab": 1}],
        [{"y": 1}, {"x-ab": "s"}],
    ),
    (
        "property-names",
        {
            "type": "object",
            "propertyNames": {"pattern": "^[a-z]{1,3}$"},
            "additionalProperties": {"type": "boolean"},
            "maxProperties": 2,
        },
        [{"ab": True}],
        [{"ABCD": True}, {"a": 1}, {"a": True, "b": False, "c": True}],
    ),
    (
        "property-names-enum",
        {"type": "object", "propertyNames": {"enum": ["x", "y"]}, "additionalProperties": {"type": "integer"}},
        [{"x": 1}, {"x": 1, "y": 2}],
        [{"z": 1}],
    ),
]


@pytest.mark.parametrize(("schema", "good", "bad"), [pytest.param(*c[1:], id=c[0]) for c in CASES])
def test_the_grammar_takes_valid_documents_and_refuses_invalid_ones(
    schema: dict[str, Any], good: list[Any], bad: list[Any]
) -> None:
    takes_and_refuses(schema, good, bad, bad_is_invalid=False)


@pytest.mark.parametrize(("schema", "good", "bad"), [pytest.param(*c[1:], id=c[0]) for c in CASES])
def test_every_prefix_of_a_valid_document_closes_validly(
    schema: dict[str, Any], good: list[Any], bad: list[Any]
) -> None:
    """What the closing watch does at any budget: from any point of the output, the shortest ending validates."""
    closes_from_every_prefix(schema, good[-1])


def _longest(dfa: Any) -> int | None:
    """The most characters a text `dfa` accepts takes; None when it has no end (a cycle)."""
    memo: dict[int, int] = {}
    visiting: set[int] = set()

    def walk(state: int) -> int:
        if state in memo:
            return memo[state]
        if state in visiting:
            raise OverflowError
        visiting.add(state)
        longest = max((1 + walk(target) for _, target in dfa.edges[state]), default=0)
        visiting.discard(state)
        memo[state] = longest
        return longest

    try:
        return walk(0)
    except OverflowError:
        return None


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "integer", "minimum": 5},
        {"type": "integer", "multipleOf": 12},
        {"type": "integer", "maximum": -3},
        {"type": "number", "minimum": 0},
        {"type": "number", "exclusiveMinimum": 0.5},
        {"type": "number", "maximum": 3.25},
        {"type": "number", "minimum": -1.5, "maximum": 2.75},
    ],
)
def test_every_number_has_a_longest_text(schema: dict[str, Any]) -> None:
    """A budget that holds a schema's longest document must see it end on its own: no number rule
    may run on (an unbounded one once wrote '1.111…' until the budget closed it)."""
    from asgi_llm.engines.decoding.numbers import number_dfa

    longest = _longest(number_dfa(schema))
    assert longest is not None and longest <= 40, (schema, longest)
