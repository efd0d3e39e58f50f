"""`Closer` with a toy vocabulary and a model that would never stop: every budget that can hold a
complete output gets one, and the end token waits for the grammar."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import jsonschema
import pytest

from asgi_llm.engines.decoding.closing import Closer
from asgi_llm.engines.decoding.gbnf import parse
from asgi_llm.engines.decoding.grammar import enforceable
from asgi_llm.engines.decoding.recognizer import Position
from asgi_llm.engines.decoding.schema_gbnf import schema_gbnf
from asgi_llm.engines.llamacpp.sampling import spelling

END = 0
WORDS = ['"}', '"]', '": "', '", "', "ab", "Parisian, ", '{"', "}]", "]}"]
VOCAB = ["<end>", *WORDS, *(chr(c) for c in range(32, 127))]
IDS = {piece: i for i, piece in enumerate(VOCAB)}
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 5},
        "inner": {"type": "object", "properties": {"note": {"type": "string"}}, "required": ["note"]},
    },
    "required": ["city", "tags", "inner"],
}


def tokenize(text: str) -> list[int]:
    """Longest match first, as a BPE vocabulary would mostly do."""
    out, i = [], 0
    while i < len(text):
        piece = max((p for p in VOCAB[1:] if text.startswith(p, i)), key=len)
        out.append(IDS[piece])
        i += len(piece)
    return out


def piece(token: int) -> bytes:
    return b"" if token == END else VOCAB[token].encode()


def run(schema: dict[str, Any], budget: int, wants: Callable[[str], str]) -> tuple[str, bool, bool]:
    """A model that writes `wants(text so far)` where the grammar lets it; the output, whether it
    ended on its own (an end token), and whether the closer cut it."""
    grammar = parse(schema_gbnf(enforceable(schema, "s")))
    closer = Closer(grammar, tokenize, piece, lambda t: t == END, END)
    judge = Position(grammar)  # stands in for llama.cpp's grammar sampler
    text = ""

    def allows(token: int) -> bool:
        return judge.complete if token == END else not judge.advance(VOCAB[token]).dead

    for left in range(budget, 0, -1):
        wanted = wants(text)
        choice = next((t for t in tokenize(wanted)[:1] if allows(t)), None) if wanted else END
        if choice is None:
            choice = next(t for t in range(1, len(VOCAB)) if allows(t))
        token = closer.choose(choice, left, allows)
        assert allows(token), (text, VOCAB[token])
        if token == END:
            return text, True, closer.cut
        text += VOCAB[token]
        judge = judge.advance(VOCAB[token])
    return text, False, closer.cut


def rambler(text: str) -> str:
    """Opens everything, then talks inside its first string forever."""
    if not text:
        return '{"city": "'
    return "Parisian, "


@pytest.mark.parametrize("budget", [38, 39, 40, 44, 60, 100])
def test_a_model_that_never_stops_is_closed_in_budget(budget: int) -> None:
    least = Closer(parse(schema_gbnf(enforceable(SCHEMA, "s"))), tokenize, piece, bool, END)
    assert least.least() == 38
    text, _, cut = run(SCHEMA, budget, rambler)
    jsonschema.validate(json.loads(text), SCHEMA)
    assert cut
    assert len(tokenize(text)) <= budget
    if budget >= 60:
        assert "Parisian" in json.loads(text)["city"]  # the model had its say while it could


def test_a_model_that_finishes_is_let_be() -> None:
    document = '{"city": "ab", "tags": [], "inner": {"note": "ab"}}'
    text, ended, cut = run(SCHEMA, 64, lambda text: document[len(text) :])
    assert (text, ended, cut) == (document, True, False)


def test_an_early_close_is_not_a_cut() -> None:
    grammar = parse(schema_gbnf({"type": "array", "items": {"type": "integer"}}))
    closer = Closer(grammar, tokenize, piece, lambda t: t == END, END)
    closer.took("[1, 1")
    closer.close()
    always: Callable[[int], bool] = lambda token: True
    assert VOCAB[closer.choose(IDS[","], 100, always)] == "]"
    assert closer.choose(IDS[","], 99, always) == END
    assert not closer.cut


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
