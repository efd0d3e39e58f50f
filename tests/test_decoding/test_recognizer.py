"""`Position.forced`: the text every continuation of an output must begin with, over the grammars
our JSON schemas compile to (what speculative decoding drafts ahead of the model: speculation.py)."""

from __future__ import annotations

from typing import Any

import pytest

from asgi_llm.engines.decoding.gbnf import parse
from asgi_llm.engines.decoding.recognizer import Position

from .closing_harness import grammar_of

PERSON: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "kind": {"const": "person"},
        "planet": {"enum": ["earth"]},
        "fruit": {"enum": ["apple", "apricot"]},
    },
    "required": ["name", "age", "kind", "planet", "fruit"],
}


def forced(text: str, schema: dict[str, Any] = PERSON, most: int = 64) -> str:
    position = Position(grammar_of(schema)).advance(text)
    assert not position.dead, text
    return position.forced(most)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", "{"),  # an object opens
        ("{", ""),  # a space or a break may come, or the first key's quote
        ('{"', 'name":'),  # the first required key, to its colon
        ('{"name": "Ann"', ","),  # no space before a comma: the comma
        ('{"name": "Ann",', ""),  # a space or a break may follow it
        ('{"name": "Ann", ', '"age":'),  # the next required key, in order
        ('{"name": "Ann", "age": 4', ""),  # more digits or the comma
        ('{"name": "Ann", "age": 4, "kind": ', '"person",'),  # a const, whole, and the comma after it
        ('{"name": "Ann", "age": 4, "kind": "person", "planet": ', '"earth",'),  # an enum of one
        (
            '{"name": "Ann", "age": 4, "kind": "person", "planet": "earth", "fruit": "',
            "ap",
        ),  # what the enum's values share
        ('{"name": "Ann", "age": 4, "kind": "person", "planet": "earth", "fruit": "apple"', ""),  # a space may come
        ('{"name": "Ann", "age": 4, "kind": "person", "planet": "earth", "fruit": "apple" ', "}"),  # the object closes
        ("{\n", "  "),  # a member a line: its indent (two spaces, or four)
        ('{\n  "', 'name": "'),  # the first key, the space a broken object puts after a colon, a string's quote
        ('{\n  "name": "Ann"', ',\n  "age": '),  # the comma, the next line and its key: one text
        ('{\n  "name": "Ann",\n  "age": 4', ""),  # more digits or the comma
        (
            '{\n    "name": "Ann",\n    "age": 4,\n    "kind": "person",\n    "planet": "earth",\n    "fruit": "apple"',
            "\n}",
        ),  # the closing line, at four spaces a level as the object began
    ],
)
def test_the_text_every_continuation_begins_with(text: str, expected: str) -> None:
    assert forced(text) == expected


def test_a_container_keeps_the_layout_it_began() -> None:
    """Inline stays inline; a member a line keeps its indent."""
    grammar = grammar_of(PERSON)
    assert Position(grammar).advance('{"name": "Ann",\n').dead
    assert Position(grammar).advance('{\n  "name": "Ann", "age"').dead
    assert Position(grammar).advance('{\n  "name": "Ann",\n    "age"').dead
    assert Position(grammar).advance('{\n  "name": "Ann",\n  "age": 4}').dead


def test_an_inline_container_may_sit_on_a_broken_one_s_line() -> None:
    """As models write short lists: a member a line, one of them a list on its own line."""
    schema = {
        "type": "object",
        "properties": {"tags": {"type": "array", "items": {"type": "string"}}, "n": {"type": "integer"}},
        "required": ["tags", "n"],
    }
    grammar = grammar_of(schema)
    assert Position(grammar).advance('{\n  "tags": ["a", "b"],\n  "n": 1\n}').complete
    assert Position(grammar).advance('{\n    "tags": [\n        "a"\n    ],\n    "n": 1\n}').complete
    assert Position(grammar).advance('{\n  "tags": ["a",\n').dead  # inline to its end


def test_nothing_is_forced_where_the_output_may_end() -> None:
    done = '{"name": "A", "age": 1, "kind": "person", "planet": "earth", "fruit": "apple"}'
    assert forced(done) == ""  # a space may follow, or the end
    assert Position(parse('root ::= "ab" "c"?')).advance("ab").forced() == ""


def test_what_is_forced_stops_at_most_and_at_a_choice() -> None:
    assert forced('{"name": "Ann", ', most=3) == '"ag'
    assert Position(parse('root ::= "ab" [c-d] "e"')).forced() == "ab"
    assert Position(parse('root ::= "ab" ("x" | "x") "y" [^z]')).forced() == "abxy"  # two ways, one text
    assert Position(parse('root ::= "ab" [x] "y"')).forced() == "abxy"  # a class of one character


def test_a_dead_position_forces_nothing() -> None:
    position = Position(parse('root ::= "ab"')).advance("x")
    assert position.dead and position.forced() == ""
