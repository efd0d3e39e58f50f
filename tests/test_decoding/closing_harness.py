"""A toy vocabulary and a fake model to drive `Closer` with, a second `Position` standing in for
llama.cpp's grammar sampler (it says which tokens the grammar allows next)."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from asgi_llm.engines.decoding.closing import Closer
from asgi_llm.engines.decoding.gbnf import Grammar, parse
from asgi_llm.engines.decoding.grammar import enforceable
from asgi_llm.engines.decoding.recognizer import Position
from asgi_llm.engines.decoding.schema_gbnf import schema_gbnf

END = 0
WORDS = ['"}', '"]', '": "', '", "', "ab", "Parisian, ", '{"', "}]", "]}"]
VOCAB = ["<end>", *WORDS, *(chr(c) for c in range(32, 127)), "é"]
IDS = {piece: i for i, piece in enumerate(VOCAB)}
_LONGEST = max(map(len, VOCAB))  # a text's first token is read in so many characters

Allows = Callable[[int], bool]
Model = Callable[[str, Allows], int]  # the text so far, the sampler's verdict -> the token sampled


def grammar_of(schema: dict[str, Any]) -> Grammar:
    return parse(schema_gbnf(enforceable(schema, "s")))


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


def closer(grammar: Grammar) -> Closer:
    return Closer(grammar, tokenize, piece, lambda t: t == END, END)


def run(grammar: Grammar, budget: int, model: Model) -> tuple[str, bool, bool]:
    """The output of `model` under the grammar sampler and a closer, in `budget` tokens; whether
    it ended on its own (an end token), and whether the closer cut it."""
    watch = closer(grammar)
    judge = Position(grammar)
    text = ""

    def allows(token: int) -> bool:
        return judge.complete if token == END else not judge.advance(VOCAB[token]).dead

    for left in range(budget, 0, -1):
        token = watch.choose(model(text, allows), left, allows)
        assert allows(token), (text, VOCAB[token])
        if token == END:
            return text, True, watch.cut
        text += VOCAB[token]
        judge = judge.advance(VOCAB[token])
    return text, False, watch.cut


def writer(wants: Callable[[str], str]) -> Model:
    """A model that writes `wants(text so far)` where the grammar lets it (the first allowed token otherwise)."""

    def model(text: str, allows: Allows) -> int:
        wanted = wants(text)
        if not wanted:
            return END
        choice = next((t for t in tokenize(wanted[:_LONGEST])[:1] if allows(t)), None)
        return choice if choice is not None else next(t for t in [*range(1, len(VOCAB)), END] if allows(t))

    return model


def sampler(rng: random.Random, stop: float = 0.1) -> Model:
    """A model that samples any token the grammar allows, the end token (once allowed) with odds `stop`."""

    def model(text: str, allows: Allows) -> int:
        if rng.random() < stop and allows(END):
            return END
        order = list(range(1, len(VOCAB)))
        rng.shuffle(order)
        return next((t for t in order if allows(t)), END)

    return model
