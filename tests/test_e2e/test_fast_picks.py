"""Greedy and temperature sampling read the logits directly instead of running llama.cpp's chain:
with the real model, greedy must pick exactly what llama.cpp's logit-bias and greedy samplers
pick, and top_p / min_p must leave the exact candidates: the ones a full sort in double precision
gives, which are llama.cpp's plus, in a flat distribution, a few tokens of negligible probability
at the edge that its single-precision running sums drop."""

from __future__ import annotations

import ctypes

import llama_cpp
import numpy as np
import pytest
from llama_cpp import _internals

from asgi_llm.core import SamplingParams
from asgi_llm.engines.llamacpp.jobs import BatchToken
from asgi_llm.engines.llamacpp.native import Decoder, Model
from asgi_llm.engines.llamacpp.picks import PENALTY_WINDOW, SampledPick
from asgi_llm.engines.llamacpp.sampling import Sampling

STEPS = 24


def llama_cpp_greedy(bias: dict[int, float], penalties: dict[str, float], n_vocab: int) -> object:
    chain: object = _internals.LlamaSampler()
    if bias:
        chain.add_logit_bias(n_vocab, bias)  # type: ignore[attr-defined]
    if penalties:
        chain.add_penalties(  # type: ignore[attr-defined]
            n_vocab, PENALTY_WINDOW, penalties["repeat_penalty"], penalties["frequency_penalty"],
            penalties["presence_penalty"],
        )  # fmt: skip
    chain.add_greedy()  # type: ignore[attr-defined]
    return chain


def logits(model: Model, decoder: Decoder, row: int) -> np.ndarray:
    return np.ctypeslib.as_array(decoder.logits(row), shape=(model.n_vocab,)).copy()


PENALTIES = {"repeat_penalty": 1.3, "frequency_penalty": 0.5, "presence_penalty": 0.4}


@pytest.mark.parametrize("kind", ["no bias", "ban the winner", "force a token", "ban the end tokens", "penalties"])
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
        "penalties": {0: -100.0, 2: -100.0},
    }[kind]
    penalties = PENALTIES if kind == "penalties" else {}
    params = SamplingParams(temperature=0, logit_bias=tuple(bias.items()), **penalties)  # type: ignore[arg-type]
    sampling = Sampling(model, decoder.logits, params, 0)
    chain = llama_cpp_greedy(bias, penalties, model.n_vocab)
    picks = []
    unpenalized = []  # what the biased logits alone would have picked
    steps = STEPS * 4 if penalties else STEPS  # past the penalties' window, so tokens leave it too
    for _ in range(steps):
        before = logits(model, decoder, row)
        expected = int(chain.sample(decoder.context, row))  # type: ignore[attr-defined]
        token = sampling.sample(row, decoder.context, steps)
        assert token == expected
        assert np.array_equal(logits(model, decoder, row), before), "the model's logits were changed"
        picks.append(token)
        biased = before.copy()
        biased[list(bias)] += list(bias.values())
        unpenalized.append(int(biased.argmax()))
        decoder.decode([BatchToken(token, position, 0, True)])
        position, row = position + 1, 0
    if kind == "ban the winner":
        assert picks[0] != natural
    if kind == "force a token":
        assert picks == [4321] * STEPS
    if kind == "penalties":
        assert picks != unpenalized, "the penalties changed no pick"
    if kind != "force a token":
        assert len(set(picks)) > 3, "a real continuation, not one token over and over"


def llama_cpp_kept(model: Model, logits: np.ndarray, bias: dict[int, float], top_p: float, min_p: float) -> set[int]:
    chain: object = _internals.LlamaSampler()
    chain.add_logit_bias(model.n_vocab, bias)  # type: ignore[attr-defined]
    if top_p < 1:
        chain.add_top_p(top_p, 1)  # type: ignore[attr-defined]
    if min_p > 0:
        chain.add_min_p(min_p, 1)  # type: ignore[attr-defined]
    data = np.zeros(model.n_vocab, dtype=[("id", np.int32), ("logit", np.float32), ("p", np.float32)])
    data["id"] = np.arange(model.n_vocab)
    data["logit"] = logits
    view = llama_cpp.llama_token_data_array(
        data=data.ctypes.data_as(llama_cpp.llama_token_data_p), size=model.n_vocab, selected=-1, sorted=False
    )
    llama_cpp.llama_sampler_apply(chain.sampler, ctypes.byref(view))  # type: ignore[attr-defined]
    return set(data["id"][: view.size].tolist())


@pytest.mark.parametrize(("top_p", "min_p"), [(0.5, 0.0), (0.9, 0.0), (0.95, 0.0), (1.0, 0.05), (0.9, 0.1)])
def test_top_p_and_min_p_keep_what_llama_cpp_keeps(loaded: tuple[Model, Decoder], top_p: float, min_p: float) -> None:
    model, decoder = loaded
    decoder.clear()
    prompt = model.tokenize("Once upon a time, in a lighthouse by the sea, there lived", add_bos=True)
    decoder.decode([BatchToken(t, i, 0, True) for i, t in enumerate(prompt)])
    bias = {0: -100.0, 2: -100.0}
    params = SamplingParams(temperature=0.8, top_p=top_p, min_p=min_p, logit_bias=tuple(bias.items()))
    pick = SampledPick(params, model.n_vocab, seed=1)
    sizes = []
    for row in range(len(prompt)):  # every position of the prompt: peaked and flat distributions alike
        kept = pick.kept(decoder.logits(row))
        assert kept is not None
        ours = set(kept.tolist())
        values = logits(model, decoder, row).astype(np.float64)
        values[list(bias)] += list(bias.values())
        assert ours == exact_kept(values, top_p, min_p)
        theirs = llama_cpp_kept(model, logits(model, decoder, row), bias, top_p, min_p)
        assert theirs <= ours
        probabilities = np.exp(values - values.max()) / np.exp(values - values.max()).sum()
        assert probabilities[sorted(ours - theirs)].sum() < 1e-3
        sizes.append(len(kept))
    assert max(sizes) > 1, "some position leaves a real choice"


def exact_kept(values: np.ndarray, top_p: float, min_p: float) -> set[int]:
    keep = np.ones(len(values), dtype=bool)
    if top_p < 1:
        order = np.argsort(-values, kind="stable")
        probabilities = np.exp(values - values.max())
        running = np.cumsum(probabilities[order]) / probabilities.sum()
        keep[:] = False
        keep[order[: int(np.argmax(running >= top_p)) + 1]] = True
    if min_p > 0:
        keep &= values >= values.max() + np.log(min_p)
    return set(np.flatnonzero(keep).tolist())
