"""Schemas as the grammar converter enforces them: refused when it cannot, rewritten when it can.

Every rewritten schema also goes through llama.cpp's own converter here, and random values
the grammar would allow are checked against the original schema by `jsonschema`.
"""

from __future__ import annotations

from typing import Any

import pytest

from asgi_llm.core import Finish, InternalError, InvalidRequest, OutputFormat, TextDelta, Unsupported, Usage
from asgi_llm.engines.decoding.forms import (
    ANY,
    Choice,
    Closed,
    Form,
    FreeKeys,
    Items,
    Plain,
    Text,
    Tuple,
    Values,
    values_of,
)
from asgi_llm.engines.decoding.grammar import (
    check_schema,
    checked_output,
    enforceable,
    validator,
)
from asgi_llm.engines.decoding.schema_gbnf import schema_gbnf

PARAM = "response_format.json_schema.schema"
PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 20}, "age": {"type": "integer"}},
    "required": ["name", "age"],
}


def rewrite(schema: dict[str, Any], **options: Any) -> Form:
    out = enforceable(schema, PARAM, **options)
    schema_gbnf(out)  # the converter takes every rewritten schema without a fault
    assert not out.defs
    return out.root


@pytest.mark.parametrize(
    "schema",
    [
        pytest.param({"type": "objet"}, id="unknown-type"),
        pytest.param({"properties": {"a": {"minimum": "zero"}}}, id="minimum-not-a-number"),
        pytest.param({"required": "a"}, id="required-not-a-list"),
        pytest.param({"type": "string", "maxLength": -1}, id="negative-length"),
        pytest.param({"$schema": ["not", "a", "uri"]}, id="schema-uri-not-a-string"),
    ],
)
def test_invalid_schemas_are_400_naming_the_param(schema: dict[str, Any]) -> None:
    with pytest.raises(InvalidRequest) as caught:
        check_schema(schema, PARAM)
    assert caught.value.param == PARAM and caught.value.status == 400
    assert not isinstance(caught.value, Unsupported)


def test_a_schema_must_be_an_object() -> None:
    with pytest.raises(InvalidRequest, match="JSON Schema object"):
        check_schema([{"type": "string"}], PARAM)


@pytest.mark.parametrize(
    ("schema", "keyword"),
    [
        pytest.param({"type": "number", "exclusiveMinimum": 1e12}, "bounds", id="huge-exclusive-bound"),
        pytest.param({"type": "number", "multipleOf": 0.1}, "multipleOf", id="fractional-multiple-of"),
        pytest.param({"type": "string", "pattern": "(?=a)b"}, "pattern", id="lookahead-pattern"),
        pytest.param({"type": "string", "pattern": "(a)\\1"}, "pattern", id="back-reference"),
        pytest.param({"type": "string", "pattern": "a^b"}, "no string", id="anchor-matching-nothing"),
        pytest.param({"type": "array", "uniqueItems": True}, "uniqueItems", id="unique-items"),
        pytest.param(
            {"patternProperties": {"^a": {}, "^b": {}, "^c": {}, "^d": {}}}, "More than 3", id="many-pattern-props"
        ),
        pytest.param({"type": "object", "minProperties": 2}, "minProperties", id="min-properties-free-keys"),
        pytest.param({"properties": {"a": {"type": "string", "pattern": "\\bx"}}}, "pattern", id="nested-pattern"),
        pytest.param({"$ref": "https://example.com/s.json"}, "reference", id="remote-ref"),
        pytest.param({"type": "array", "items": {"type": "string"}, "uniqueItems": True}, "uniqueItems", id="unique"),
        pytest.param({"not": {"format": "email"}}, "not", id="not-format"),
        pytest.param({"type": "array", "not": {"const": [1]}}, "not", id="not-array-value"),
        pytest.param({"type": "string", "pattern": "^a+$", "minLength": 1000}, "minLength", id="long-pattern"),
        pytest.param({"type": "array", "contains": {"type": "integer"}, "maxItems": 3}, "contains", id="contains-max"),
        pytest.param({"enum": ["a\\b", "c"]}, "backslash", id="enum-backslash"),
        pytest.param({"properties": {'say "hi"': {"type": "string"}}}, "Property names", id="quoted-property"),
        pytest.param({"type": "string", "format": "date", "maxLength": 5}, "lengths", id="date-too-short"),
    ],
)
def test_what_decoding_cannot_enforce_is_unsupported(schema: dict[str, Any], keyword: str) -> None:
    with pytest.raises(Unsupported, match=keyword) as caught:
        rewrite(schema)
    assert caught.value.param == PARAM and caught.value.status == 400


@pytest.mark.parametrize(
    "schema",
    [
        pytest.param({"allOf": [{"type": "string"}, {"type": "integer"}]}, id="conflicting-all-of"),
        pytest.param({"properties": {"a": False}, "required": ["a"]}, id="false-required-property"),
        pytest.param({"type": "object", "required": ["a"], "additionalProperties": False}, id="required-closed"),
        pytest.param({"type": "array", "items": {"enum": ["a"]}, "uniqueItems": True, "minItems": 2}, id="unique-few"),
        pytest.param({"oneOf": [{"type": "string"}, {"type": "null"}], "type": "integer"}, id="no-branch-left"),
        pytest.param(
            {
                "$defs": {"n": {"properties": {"next": {"$ref": "#/$defs/n"}}, "required": ["next"]}},
                "$ref": "#/$defs/n",
            },
            id="endless-recursion",
        ),
    ],
)
def test_a_schema_no_value_satisfies_is_a_400_saying_so(schema: dict[str, Any]) -> None:
    with pytest.raises(InvalidRequest, match="No value") as caught:
        rewrite(schema)
    assert not isinstance(caught.value, Unsupported) and caught.value.param == PARAM


def test_a_format_jsonschema_checks_that_no_grammar_writes_is_unsupported(monkeypatch: pytest.MonkeyPatch) -> None:
    """As with `json-pointer` where the `jsonpointer` package is installed: checked, never written."""
    from asgi_llm.engines.decoding import scalars as module

    monkeypatch.setattr(module, "checked_formats", lambda schema: frozenset({"json-pointer"}))
    with pytest.raises(Unsupported, match="json-pointer"):
        rewrite({"type": "string", "format": "json-pointer"})


def test_unsatisfiable_enum_is_invalid() -> None:
    with pytest.raises(InvalidRequest, match="No value") as caught:
        rewrite({"type": "string", "enum": [1, 2]})
    assert not isinstance(caught.value, Unsupported)
    with pytest.raises(InvalidRequest, match="No value") as caught:
        rewrite({"enum": []})
    assert not isinstance(caught.value, Unsupported)
    with pytest.raises(InvalidRequest, match="No value") as caught:
        rewrite({"type": "array", "minItems": 3, "maxItems": 2})
    assert not isinstance(caught.value, Unsupported)
    with pytest.raises(InvalidRequest, match="No value") as caught:
        rewrite({"type": "string", "minLength": 3, "maxLength": 2})
    assert not isinstance(caught.value, Unsupported)


def test_objects_keep_their_properties_and_lose_extra_keys() -> None:
    out = rewrite({**PERSON, "title": "Person", "description": "someone"})
    assert out == Closed((("name", Text(most=20)), ("age", Plain("integer"))), ("name", "age"))


def test_annotations_and_unknown_keywords_are_dropped_harmless_ones_too() -> None:
    schema = {"type": "array", "items": {"type": "boolean", "x-vendor": 1, "nullable": True}, "uniqueItems": False}
    assert rewrite(schema) == Items(Plain("boolean"))


def test_references_are_inlined() -> None:
    schema = {
        "$defs": {"Point": {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]}},
        "type": "object",
        "properties": {"a": {"$ref": "#/$defs/Point"}, "b": {"$ref": "#/$defs/Point", "description": "second"}},
        "required": ["a", "b"],
    }
    point = Closed((("x", Plain("number")),), ("x",))
    out = rewrite(schema)
    assert isinstance(out, Closed) and out.declared == {"a": point, "b": point}


def test_a_dangling_reference_is_invalid() -> None:
    with pytest.raises(InvalidRequest, match="refers to nothing"):
        rewrite({"$ref": "#/$defs/Missing"})


def test_type_lists_and_combinators_become_any_of() -> None:
    assert rewrite({"type": ["string", "null"], "maxLength": 3}) == Choice((Text(most=3), Plain("null")))
    dates = rewrite({"type": "string", "oneOf": [{"format": "date"}, {"maxLength": 2}]})
    assert dates == Choice((Text("date"), Text(most=2)))
    assert isinstance(dates, Choice) and isinstance(dates.options[0], Text) and dates.options[0].dfa is not None
    assert rewrite({"allOf": [{"type": "string"}, {"maxLength": 4}]}) == Text(most=4)


def test_enum_keeps_only_values_the_rest_allows() -> None:
    assert rewrite({"type": "string", "enum": ["a", 1, "b"]}) == Values(('"a"', '"b"'))
    assert rewrite({"enum": ["only", "other"], "const": "only"}) == values_of(["only"])


def test_the_empty_schema_allows_any_value() -> None:
    out = rewrite({})
    assert out == ANY and isinstance(out, Choice)
    assert [alt.kind for alt in out.options if isinstance(alt, Plain)] == [
        *("object", "array", "string", "number", "boolean", "null")
    ]


def test_tool_arguments_must_be_an_object() -> None:
    assert rewrite({}, root_type="object") == Plain("object")
    assert rewrite({"properties": {}}, root_type="object") == Closed(())


def test_declared_properties_close_an_object_unless_extra_keys_are_asked_for() -> None:
    assert rewrite({"type": "object", "properties": {}}) == Closed(())
    assert rewrite({"type": "object"}) == Plain("object")
    assert rewrite({"type": "object", "properties": {}, "additionalProperties": True}) == Plain("object")
    integers = {"type": "object", "properties": {}, "additionalProperties": {"type": "integer"}}
    assert rewrite(integers) == FreeKeys(Plain("integer"))
    with pytest.raises(Unsupported, match="JSON object"):
        rewrite({"type": "string"}, root_type="object")


def test_draft7_tuples_and_bounded_arrays() -> None:
    tuple_schema = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "array",
        "items": [{"type": "string"}],
    }
    assert rewrite(tuple_schema) == Tuple((Plain("string"),))
    bounded = {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3}
    assert rewrite(bounded) == Items(Plain("integer"), 1, 3)


def test_strings_keep_control_characters_and_lone_surrogates_out_and_exponents_are_short() -> None:
    schema = {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "string"}}}
    gbnf = schema_gbnf(enforceable(schema, "s"))
    assert 'char ::= [^"\\\\\\x7F\\x00-\\x1F] |' in gbnf
    assert '"u" [dD] [0-7] [0-9a-fA-F]{2}' in gbnf and "[eE] [-+]? [0-9] [0-9]?)?" in gbnf


def test_output_schema_for_each_kind() -> None:
    from asgi_llm.engines.decoding.compiled import Grammars
    from asgi_llm.engines.decoding.constraints import _output

    anything = _output(OutputFormat("json_object", "format"), Grammars())
    assert anything.form.root == Plain("object") and anything.check.is_valid({}) and not anything.check.is_valid([])
    person = _output(OutputFormat("json_schema", PARAM, schema=PERSON), Grammars())
    assert isinstance(person.form.root, Closed) and person.form.root.required == ("name", "age")
    assert person.check.is_valid({"name": "a", "age": 1}) and not person.check.is_valid({"name": "a"})


def _finish(reason: str = "stop", stop_sequence: str | None = None) -> Finish:
    return Finish(reason, Usage(3, 4), stop_sequence=stop_sequence)  # type: ignore[arg-type]


def test_checked_output_passes_a_valid_document() -> None:
    events = [None, TextDelta('{"name": "Al'), TextDelta('", "age": 3} '), _finish()]
    assert list(checked_output(events, validator(PERSON))) == events


def test_checked_output_reads_the_document_from_the_prefill_it_continues() -> None:
    events = [TextDelta('an", "age": 3}'), _finish()]
    assert list(checked_output(events, validator(PERSON), '{"name": "Al')) == events
    with pytest.raises(InternalError):
        list(checked_output(events, validator(PERSON)))  # the continuation alone is no document


@pytest.mark.parametrize("text", ['{"name": "Al"}', '{"name": "Al", "age": 3', "not json"])
def test_checked_output_raises_on_a_finished_bad_document(text: str) -> None:
    with pytest.raises(InternalError):
        list(checked_output([TextDelta(text), _finish()], validator(PERSON)))


@pytest.mark.parametrize("finish", [_finish("length"), _finish("stop", "}")])
def test_checked_output_leaves_cut_off_documents_alone(finish: Finish) -> None:
    events = [TextDelta('{"name": "Al'), finish]
    assert list(checked_output(events, validator(PERSON))) == events
