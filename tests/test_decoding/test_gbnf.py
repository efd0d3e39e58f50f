"""GBNF read in Python: the shortest ending of every prefix of a valid document completes it validly."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest

from asgi_llm.engines.decoding.gbnf import GrammarError, parse
from asgi_llm.engines.decoding.grammar import enforceable, relax_space
from asgi_llm.engines.decoding.recognizer import Position
from asgi_llm.engines.decoding.schema_gbnf import schema_gbnf
from asgi_llm.engines.decoding.tool_detect import trigger_grammar

PET: dict[str, Any] = {
    "type": "object",
    "properties": {
        "kind": {"enum": ["cat", "dog"]},
        "name": {"type": "string", "maxLength": 12},
        "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 3},
        "born": {"type": "string", "format": "date"},
        "weight": {"type": "number"},
        "owner": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]},
        "extra": {"type": "object"},
    },
    "required": ["kind", "name", "tags", "born", "owner"],
}
DOCUMENT = {
    "kind": "dog",
    "name": 'Rex \\"the" é',
    "tags": ["a", "b c"],
    "born": "2020-02-28",
    "owner": {"id": -12},
    "weight": 1.5e3,
    "extra": {"k": [1, None, True, {"z": "q"}], "e": {}},
}


def _grammar(schema: dict[str, Any]) -> str:
    return schema_gbnf(enforceable(schema, "s"))


def test_literals_classes_and_repetitions() -> None:
    grammar = parse('root ::= "ab" [x-z]{2,3} item* ("!" | "?")+\nitem ::= [^a-z] # a comment\n')
    assert grammar.shortest["root"] == "abxx!"
    start = Position(grammar)
    assert not start.advance("abyzz1!?").dead and start.advance("abyzz1!?").complete
    assert start.advance("abyzzz").dead  # four of [x-z]
    assert start.advance("abx").distance == 2


@pytest.mark.parametrize("text", ["root ::= other", 'root ::= "a" loop\nloop ::= "b" loop', "root ::= [a"])
def test_grammars_it_cannot_follow_are_refused(text: str) -> None:
    with pytest.raises((GrammarError, IndexError)):
        parse(text)


@pytest.mark.parametrize("pretty", [False, True])
def test_every_prefix_of_a_document_ends_validly(pretty: bool) -> None:
    gbnf = _grammar(PET)
    grammar = parse(relax_space(gbnf) if pretty else gbnf)
    text = json.dumps(DOCUMENT, ensure_ascii=False, indent=2 if pretty else None)
    position = Position(grammar)
    jsonschema.validate(json.loads(position.ending()), PET)
    for i, ch in enumerate(text):
        position = position.advance(ch)
        assert not position.dead, text[: i + 1]
        ending = position.ending()
        assert len(ending) == position.distance
        jsonschema.validate(json.loads(text[: i + 1] + ending), PET)
    assert position.complete


def test_text_outside_the_grammar_is_found() -> None:
    position = Position(parse(_grammar(PET)))
    assert position.advance('{"kind":"cow"').dead
    assert position.advance('{"kind":"cat","name":"0123456789abc').dead  # maxLength 12


def test_whitespace_runs_are_bounded() -> None:
    """No grammar we generate lets a model write spaces or newlines without end."""
    start = Position(parse(_grammar(PET))).advance("{")
    assert start.advance(" ").distance and start.advance("  ").dead
    broken = start.advance("\n")  # a break inside the object: its members' indent follows, 2 or 4 spaces
    assert broken.forced(8) == "  " and not broken.advance("    ").dead
    assert broken.advance("     ").dead and broken.advance("\n").dead and broken.advance("\t").dead
    relaxed = Position(parse(relax_space(_grammar(PET)))).advance("{\n")
    assert not relaxed.advance(" " * 20).dead and relaxed.advance(" " * 21).dead
    call = _grammar({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]})
    wrapped = Position(parse(trigger_grammar(call, "<tool_call>", "", parallel=True)))
    assert wrapped.advance("\n" * 21).dead


def test_a_wrapped_call_closes_its_wrapper() -> None:
    call = _grammar({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]})
    gbnf = trigger_grammar(call, "<tool_call>", "", parallel=True)
    position = Position(parse(gbnf)).advance(' {"n": 4')
    assert position.ending() == "}</tool_call>"
    listed = Position(parse(trigger_grammar(call, "[TOOL_CALLS]", "", parallel=True))).advance('[{"n": 4}, {"n"')
    assert listed.ending() == ":0}]"
