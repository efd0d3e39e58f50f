"""Greedy sampling reads the logits directly instead of running llama.cpp's chain: with the real
model it must pick exactly what llama.cpp's logit-bias and greedy samplers pick, and leave the
model's logits as they were."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from llama_cpp import _internals

from asgi_llm import ModelConfig
from asgi_llm.core import SamplingParams
from asgi_llm.engines.batching import BatchToken
from asgi_llm.engines.llamacpp.native import Decoder, Model, new_single_context
from asgi_llm.engines.llamacpp.sampling import Sampling

STEPS = 24


@pytest.fixture(scope="module")
def loaded() -> Iterator[tuple[Model, Decoder]]:
    config = ModelConfig(n_ctx=256)
    model = Model(config)
    decoder = Decoder(new_single_context(model, config, size=256, batch=64))
    yield model, decoder
    decoder.close()
    model.close()


def llama_cpp_pick(decoder: Decoder, row: int, bias: dict[int, float], n_vocab: int) -> int:
    chain: object = _internals.LlamaSampler()
    if bias:
        chain.add_logit_bias(n_vocab, bias)  # type: ignore[attr-defined]
    chain.add_greedy()  # type: ignore[attr-defined]
    return int(chain.sample(decoder.context, row))  # type: ignore[attr-defined]


def logits(model: Model, decoder: Decoder, row: int) -> np.ndarray:
    return np.ctypeslib.as_array(decoder.logits(row), shape=(model.n_vocab,)).copy()


@pytest.mark.parametrize("kind", ["no bias", "ban the winner", "force a token", "ban the end tokens"])
def test_greedy_pick_equals_llama_cpp_greedy(loaded: tuple[Model, Decoder], kind: str) -> None:
    model, decoder = loaded
    decoder.clear()
    prompt = model.tokenize("The lighthouse keeper climbed the stairs and", add_bos=True)
    decoder.decode([BatchToken(t, i, 0, i == len(prompt) - 1) for i, t in enumerate(prompt)])
    position, row = len(prompt), len(prompt) - 1
    natural = int(logits(model, decoder, row).argmax())
    bias = {
        "no bias": {},
        "ban the winner": {natural: -100.0},
        "force a token": {4321: 100.0},
        "ban the end tokens": {0: -100.0, 2: -100.0, model.eos: -100.0},
    }[kind]
    sampling = Sampling(model, decoder.logits, SamplingParams(temperature=0, logit_bias=tuple(bias.items())), 0)
    picks = []
    for _ in range(STEPS):
        before = logits(model, decoder, row)
        expected = llama_cpp_pick(decoder, row, bias, model.n_vocab)
        token = sampling.sample(row, decoder.context, STEPS)
        assert token == expected
        assert np.array_equal(logits(model, decoder, row), before), "the model's logits were changed"
        picks.append(token)
        decoder.decode([BatchToken(token, position, 0, True)])
        position, row = position + 1, 0
    if kind == "ban the winner":
        assert picks[0] != natural
    if kind == "force a token":
        assert picks == [4321] * STEPS
    if kind != "force a token":
        assert len(set(picks)) > 3, "a real continuation, not one token over and over"
