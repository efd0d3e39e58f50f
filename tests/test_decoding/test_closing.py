"""`Closer` with a toy vocabulary and a model that would never stop: every budget that can hold a
complete output gets one, and the end token waits for the grammar."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import jsonschema
import pytest

from asgi_llm.engines.decoding.forms import Items, Plain, Rewritten
from asgi_llm.engines.decoding.gbnf import parse
from asgi_llm.engines.decoding.recognizer import Position
from asgi_llm.engines.decoding.schema_gbnf import schema_gbnf
from asgi_llm.engines.llamacpp.sampling import spelling

from .closing_harness import END, IDS, closer, grammar_of, run, tokenize, writer

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 5},
        "inner": {"type": "object", "properties": {"note": {"type": "string"}}, "required": ["note"]},
    },
    "required": ["city", "tags", "inner"],
}


def rambler(text: str) -> str:
    """Opens everything, then talks inside its first string forever."""
    if not text:
        return '{"city": "'
    return "Parisian, "


@pytest.mark.parametrize("budget", [38, 39, 40, 44, 60, 100])
def test_a_model_that_never_stops_is_closed_in_budget(budget: int) -> None:
    assert closer(grammar_of(SCHEMA)).least() == 38
    text, _, cut = run(grammar_of(SCHEMA), budget, writer(rambler))
    jsonschema.validate(json.loads(text), SCHEMA)
    assert cut
    assert len(tokenize(text)) <= budget
    if budget >= 60:
        assert "Parisian" in json.loads(text)["city"]  # the model had its say while it could


def test_a_model_that_finishes_is_let_be() -> None:
    document = '{"city": "ab", "tags": [], "inner": {"note": "ab"}}'
    text, ended, cut = run(grammar_of(SCHEMA), 64, writer(lambda text: document[len(text) :]))
    assert (text, ended, cut) == (document, True, False)


def test_an_early_close_is_not_a_cut() -> None:
    watch = closer(parse(schema_gbnf(Rewritten(Items(Plain("integer"))))))
    watch.took("[1, 1")
    watch.close()
    always: Callable[[int], bool] = lambda token: True
    assert watch.choose(IDS[","], 100, always) == IDS["]"]
    assert watch.choose(IDS[","], 99, always) == END
    assert not watch.cut


class SentencePieceLike:
    """Puts a space before a text's first character, as SentencePiece vocabularies do."""

    def __init__(self) -> None:
        self.pieces = [" ", "\n", *(chr(c) for c in range(33, 127)), *(" " + chr(c) for c in range(33, 127))]

    def tokenize(self, text: str, *, add_bos: bool, special: bool = True) -> list[int]:
        spaced = " " + text
        if spaced[1] in " \n":
            return [self.pieces.index(ch) for ch in spaced]
        return [self.pieces.index(spaced[:2]), *(self.pieces.index(ch) for ch in spaced[2:])]

    def piece(self, token: int) -> bytes:
        return self.pieces[token].encode()


def test_endings_are_spelled_without_a_leading_space() -> None:
    model: Any = SentencePieceLike()
    tokens = spelling(model, '"}]')
    assert b"".join(model.piece(t) for t in tokens) == b'"}]'


def nested_kinds(kinds: int, depth: int) -> dict[str, Any]:
    """The shape that made a real schema's outputs too ambiguous to follow (JSONSchemaBench's
    Github_ultra/o18949: 79 kinds of check, each an object whose properties are all optional):
    an `anyOf` of objects that `{"props": ` does not tell apart, nested, so a text `depth`
    levels in is open in `kinds ** depth` ways, each one parse stack to llama.cpp's sampler."""
    defs: dict[str, Any] = {
        "l0": {"type": "object", "properties": {"on": {"type": "boolean"}}, "additionalProperties": False}
    }
    for level in range(1, depth + 1):
        options = [{"type": {"const": f"k{i}"}, "props": {"$ref": f"#/$defs/l{level - 1}"}} for i in range(kinds)]
        defs[f"l{level}"] = {
            "anyOf": [{"type": "object", "properties": p, "additionalProperties": False} for p in options]
        }
    return {"$defs": defs, "type": "array", "items": {"$ref": f"#/$defs/l{depth}"}}


def test_ambiguous_nesting_is_followed_exactly() -> None:
    schema = nested_kinds(3, 6)  # 3 ** 6 ways
    text = "[" + '{"props": ' * 6 + '{"on": true}' + "}" * 6 + "]"
    check = jsonschema.Draft202012Validator(schema)
    position = Position(grammar_of(schema))
    for i, ch in enumerate(text):
        position = position.advance(ch)
        ending = position.ending()
        assert len(ending) == position.distance, text[: i + 1]
        check.validate(json.loads(text[: i + 1] + ending))
    assert position.complete


@pytest.mark.parametrize("budget", [2, 30, 50, 64])
def test_a_model_lost_in_ambiguous_nesting_is_closed_in_budget(budget: int, caplog: pytest.LogCaptureFixture) -> None:
    schema = nested_kinds(3, 6)
    grammar = grammar_of(schema)
    assert closer(grammar).least() == 2
    document = "[" + '{"props": ' * budget
    text, _, cut = run(grammar, budget, writer(lambda text: document[len(text) :]))
    jsonschema.validate(json.loads(text), schema)
    assert cut and text.count('"props"') >= budget // 11  # 9 tokens open a level, 1 closes it
    lost = [r for r in caplog.records if r.name == "asgi_llm.engine"]  # other threads of the session log too
    assert not lost  # the watch never lost its place


def test_what_the_grammar_forces_is_offered_only_where_the_watch_is_sure() -> None:
    watch = closer(grammar_of(SCHEMA))
    assert watch.forced() == "{"
    watch.took('{"')
    assert watch.forced() == 'city":'
    watch.took('city": "')
    watch.took("é".encode()[:1])  # inside a character: where the text stands is not known yet
    assert watch.forced() == ""
    watch.took("é".encode()[1:] + b'"')
    assert watch.forced() == ","  # the comma, with no space before it
    watch.took(",")
    assert watch.forced() == ""  # a space or a break may follow it
    watch.close()
    ending = watch.forced()  # closing: the rest of the watch's own ending, whole
    assert ending == Position(grammar_of(SCHEMA)).advance('{"city": "é",').ending()
    document = json.loads('{"city": "é",' + ending)
    jsonschema.validate(document, SCHEMA)
