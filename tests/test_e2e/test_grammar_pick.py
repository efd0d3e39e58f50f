"""The greedy pick under a grammar from the row's top tokens (grammar_pick.py) is the pick the
whole vocabulary gives, with the packaged model's vocabulary and grammars, over the model's own
logits and over rows made to tie at the edge of the top."""

from __future__ import annotations

import ctypes
from typing import Any

import llama_cpp
import numpy as np
import pytest

from asgi_llm.engines.llamacpp.grammar_pick import TIERS, best_allowed
from asgi_llm.engines.llamacpp.jobs import BatchToken
from asgi_llm.engines.llamacpp.native import Decoder, Model

GRAMMARS = {
    "object": 'root ::= "{" ws "\\"name\\"" ws ":" ws "\\"" [a-zA-Z ]* "\\"" ws "}"\nws ::= [ \\t\\n]*',
    "digits": "root ::= [0-9]+",
    "one word": 'root ::= "zebra"',
    "tamil": 'root ::= "\u0b95\u0bc1"',  # spelled in byte tokens
}


def grammar_sampler(model: Model, gbnf: str, taken: str = "") -> Any:
    sampler = llama_cpp.llama_sampler_init_grammar(model.vocab, gbnf.encode(), b"root")
    assert sampler
    for token in model.tokenize(taken, add_bos=False) if taken else []:
        llama_cpp.llama_sampler_accept(sampler, token)
    return sampler


def whole_vocabulary(logits: np.ndarray, grammar: Any) -> int | None:
    """llama.cpp's greedy pick after the grammar: the highest allowed, the lowest id among equals."""
    candidates = np.zeros(len(logits), dtype=[("id", np.int32), ("logit", np.float32), ("p", np.float32)])
    candidates["id"] = np.arange(len(logits))
    candidates["logit"] = logits
    view = llama_cpp.llama_token_data_array(
        data=candidates.ctypes.data_as(llama_cpp.llama_token_data_p), size=len(logits), selected=-1, sorted=False
    )
    llama_cpp.llama_sampler_apply(grammar, ctypes.byref(view))
    allowed = np.flatnonzero(np.isfinite(candidates["logit"]))
    return int(allowed[logits[allowed].argmax()]) if len(allowed) else None


@pytest.fixture(scope="module")
def rows(loaded: tuple[Model, Decoder]) -> list[np.ndarray]:
    """The model's logits after each token of a prompt that asks for JSON."""
    model, decoder = loaded
    decoder.clear()
    prompt = model.tokenize('Reply in JSON with a name: {"name": "Ada", "age": 36} and then', add_bos=True)
    decoder.decode([BatchToken(t, i, 0, True) for i, t in enumerate(prompt)])
    return [np.ctypeslib.as_array(decoder.logits(i), shape=(model.n_vocab,)).copy() for i in range(len(prompt))]


@pytest.mark.parametrize(
    ("grammar", "taken"), [("object", ""), ("object", '{"name": "A'), ("digits", "4"), ("one word", ""), ("tamil", "")]
)
def test_the_top_gives_the_whole_vocabularys_pick_or_defers(
    loaded: tuple[Model, Decoder], rows: list[np.ndarray], grammar: str, taken: str
) -> None:
    model, _ = loaded
    sampler = grammar_sampler(model, GRAMMARS[grammar], taken)
    try:
        picked = [best_allowed(row, sampler) for row in rows]
        for row, pick in zip(rows, picked, strict=True):
            if pick is not None:
                assert pick == whole_vocabulary(row, sampler)
        found = len(rows) - picked.count(None)
        assert found > 0  # the top decides somewhere (where it does not, the tests below)
    finally:
        llama_cpp.llama_sampler_free(sampler)


def test_the_wider_top_decides_where_the_narrow_one_allows_nothing_and_ties_defer(
    loaded: tuple[Model, Decoder],
) -> None:
    model, _ = loaded
    sampler = grammar_sampler(model, GRAMMARS["digits"])
    narrow, wide = TIERS
    digits = [t for t in range(model.n_vocab) if model.piece(t).isdigit()][:2]
    letters = [t for t in range(model.n_vocab) if model.piece(t).isalpha()]
    assert len(letters) > wide
    try:
        row = np.zeros(model.n_vocab, dtype=np.float32)
        row[letters[:narrow]] = 5.0  # the narrow top: letters only
        row[digits] = 1.0
        assert best_allowed(row, sampler) == digits[0] == whole_vocabulary(row, sampler)  # from the wide top
        row[letters[:-narrow]] = 3.0  # the wide top is letters too now: nothing decides
        row[letters[:narrow]] = 5.0
        assert best_allowed(row, sampler) is None and whole_vocabulary(row, sampler) == digits[0]
        row[letters[narrow - 2 : narrow]], row[digits[0]] = 4.0, 4.5  # a digit in the narrow top, over its lowest
        assert best_allowed(row, sampler) == digits[0] == whole_vocabulary(row, sampler)
        row[:] = 5.0  # every token equal: the top's best may tie with a lower id left out
        assert best_allowed(row, sampler) is None and whole_vocabulary(row, sampler) == min(digits)
    finally:
        llama_cpp.llama_sampler_free(sampler)
