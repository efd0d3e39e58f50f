"""Next-token picks read straight from the logits: the candidate sets match a plain full-sort
reference, draws follow the distribution the parameters define, seeds repeat, and the chains
they cannot reproduce are left to llama.cpp."""

from __future__ import annotations

import ctypes
import math
from typing import Any

import numpy as np
import pytest

from asgi_llm.core import SamplingParams
from asgi_llm.engines.llamacpp.picks import PENALTY_WINDOW, GreedyPick, Penalties, SampledPick, fast_pick, nucleus


def pointer(values: np.ndarray) -> Any:
    return values.ctypes.data_as(ctypes.POINTER(ctypes.c_float))


def params(**sampling: Any) -> SamplingParams:
    return SamplingParams(max_tokens=1, **sampling)


def reference_probabilities(logits: np.ndarray, sampling: SamplingParams) -> np.ndarray:
    """The chain's distribution done the plain way: bias, full sort for top_p, min_p, temperature."""
    values = logits.astype(np.float64)
    for token, bias in sampling.logit_bias:
        values[token] += bias
    keep = np.ones(len(values), dtype=bool)
    if sampling.top_p < 1:
        order = np.argsort(-values, kind="stable")
        probs = np.exp(values - values.max())
        probs /= probs.sum()
        running = np.cumsum(probs[order])
        last = int(np.argmax(running >= sampling.top_p))
        keep[:] = False
        keep[order[: last + 1]] = True
    if sampling.min_p > 0:
        keep &= values >= values.max() + math.log(sampling.min_p)
    weights = np.where(keep, np.exp((values - values.max()) / sampling.temperature), 0.0)
    return weights / weights.sum()


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9, 0.95, 0.999])
@pytest.mark.parametrize("spread", [0.5, 3.0, 12.0])
def test_nucleus_equals_a_full_sort(p: float, spread: float) -> None:
    rng = np.random.default_rng(int(p * 1000) + int(spread))
    for _ in range(20):
        values = (rng.standard_normal(5000) * spread).astype(np.float32)
        values[rng.integers(0, 5000, 50)] = -np.inf  # banned tokens
        expected = set(np.flatnonzero(reference_probabilities(values, params(top_p=p)) > 0))
        got = nucleus(values, float(values.max()), p)
        assert set(got.tolist()) == expected
        assert np.all(np.diff(values[got]) <= 0), "most likely first"


def frequencies(pick: SampledPick, logits: np.ndarray, draws: int) -> np.ndarray:
    counts = np.zeros(len(logits))
    for _ in range(draws):
        counts[pick.pick(pointer(logits))] += 1
    return counts / draws


CASES = [
    {},
    {"temperature": 0.5},
    {"temperature": 1.7},
    {"top_p": 0.8},
    {"min_p": 0.2},
    {"top_p": 0.9, "min_p": 0.1, "temperature": 0.7},
    {"logit_bias": ((0, -100.0), (5, 2.5))},
    {"logit_bias": ((0, -math.inf),), "top_p": 0.95},
]


@pytest.mark.slow  # 20,000 draws each
@pytest.mark.parametrize("sampling", CASES, ids=[str(c) for c in CASES])
def test_draws_follow_the_distribution_the_parameters_define(sampling: dict[str, Any]) -> None:
    logits = np.array([3.0, 2.0, 1.5, 1.0, 0.0, -1.0, -2.0, -4.0], dtype=np.float32)
    chosen = params(**sampling)
    expected = reference_probabilities(logits, chosen)
    draws = 20_000
    seen = frequencies(SampledPick(chosen, len(logits), seed=11), logits, draws)
    tolerance = 5 * np.sqrt(expected * (1 - expected) / draws) + 1e-9
    assert np.all(np.abs(seen - expected) <= tolerance), (seen, expected)
    assert np.all(seen[expected == 0] == 0), "a token the parameters rule out was drawn"


@pytest.mark.slow  # 20,000 draws
def test_a_draw_over_the_whole_vocabulary_lands_in_the_right_blocks() -> None:
    """Over 49,252 tokens the draw finds a block of 512 first: heavy tokens in far-apart blocks
    (the first, the last, a partial last block) come up as often as their share, and so does
    the light rest."""
    n = 49_152 + 100
    rng = np.random.default_rng(5)
    logits = (rng.standard_normal(n) - 6).astype(np.float32)
    heavy = [0, 511, 512, 20_000, n - 1]
    logits[heavy] = [4.0, 3.0, 3.5, 2.0, 3.8]
    logits[700] = 9.0
    chosen = params(logit_bias=((700, -math.inf),))
    expected = reference_probabilities(logits, chosen)
    draws = 20_000
    seen = frequencies(SampledPick(chosen, n, seed=3), logits, draws)
    for token in heavy:
        tolerance = 5 * math.sqrt(expected[token] * (1 - expected[token]) / draws)
        assert abs(seen[token] - expected[token]) <= tolerance, token
    rest = 1 - expected[heavy].sum()
    assert abs((1 - seen[heavy].sum()) - rest) <= 5 * math.sqrt(rest * (1 - rest) / draws)
    assert seen[700] == 0


def test_seeds_repeat_and_differ() -> None:
    logits = np.random.default_rng(1).standard_normal(3000).astype(np.float32)

    def run(seed: int) -> list[int]:
        pick = SampledPick(params(temperature=1.2), len(logits), seed)
        return [pick.pick(pointer(logits)) for _ in range(40)]

    assert run(7) == run(7)
    assert run(7) != run(8)


def test_the_models_logits_are_left_as_they_were() -> None:
    logits = np.random.default_rng(2).standard_normal(1000).astype(np.float32)
    before = logits.copy()
    bias = ((3, 50.0), (4, -50.0))
    assert GreedyPick(dict(bias), len(logits)).pick(pointer(logits)) == 3
    SampledPick(params(logit_bias=bias, top_p=0.9), len(logits), 1).pick(pointer(logits))
    assert np.array_equal(logits, before)


def test_greedy_takes_the_first_of_equal_highs() -> None:
    logits = np.array([0.0, 2.0, 1.0, 2.0], dtype=np.float32)
    assert GreedyPick({}, 4).pick(pointer(logits)) == 1


def test_only_top_k_chains_stay_with_llama_cpp() -> None:
    assert fast_pick(params(temperature=0), 100, 1).__class__ is GreedyPick
    assert fast_pick(params(temperature=0, top_k=5), 100, 1).__class__ is GreedyPick  # top_k cannot move the top
    assert fast_pick(params(top_p=0.9, min_p=0.05), 100, 1).__class__ is SampledPick
    assert fast_pick(params(repeat_penalty=1.1), 100, 1).__class__ is SampledPick
    assert fast_pick(params(top_k=40), 100, 1) is None
    assert fast_pick(params(top_k=40, presence_penalty=0.5), 100, 1) is None
    assert fast_pick(params(top_k=100), 100, 1).__class__ is SampledPick, "a top_k of the whole vocabulary cuts nothing"
    assert fast_pick(params(top_k=10**30), 100, 1).__class__ is SampledPick


def test_a_temperature_that_float32_rounds_to_0_is_greedy() -> None:
    """The fuzzed Anthropic body: 2.76e-272 is 0 in float32, and the draw divided by it."""
    logits = np.random.default_rng(4).standard_normal(3000).astype(np.float32)
    for temperature in (2.76e-272, 5e-324, 7e-46):
        pick = fast_pick(params(temperature=temperature), len(logits), 1)
        assert pick.__class__ is GreedyPick
        assert pick is not None and pick.pick(pointer(logits)) == int(logits.argmax())
    tiny = SampledPick(params(temperature=1.5e-45), len(logits), seed=1)  # the smallest float32 above 0
    assert {tiny.pick(pointer(logits)) for _ in range(20)} == {int(logits.argmax())}


def test_penalties_follow_llama_cpps_rules_over_the_last_64_tokens() -> None:
    sampling = params(repeat_penalty=2.0, frequency_penalty=0.25, presence_penalty=0.5)
    penalties = Penalties(sampling)
    for token in [1, 1, 2] + [3] * (PENALTY_WINDOW - 3):
        penalties.took(token)
    values = np.array([1.0, 4.0, -2.0, 0.0, 3.0], dtype=np.float32)
    penalties.apply(values)
    assert values.tolist() == pytest.approx(
        [1.0, 4.0 / 2 - (2 * 0.25 + 0.5), -2.0 * 2 - (1 * 0.25 + 0.5), 0.0 * 2 - (61 * 0.25 + 0.5), 3.0]
    )
    for _ in range(2):  # both 1s leave the window; 3 comes in twice more
        penalties.took(3)
    values = np.array([1.0, 4.0, -2.0, 1.0, 3.0], dtype=np.float32)
    penalties.apply(values)
    assert values.tolist() == pytest.approx([1.0, 4.0, -2.0 * 2 - (1 * 0.25 + 0.5), 1.0 / 2 - (63 * 0.25 + 0.5), 3.0])


def test_a_penalized_pick_avoids_what_it_took() -> None:
    logits = np.array([5.0, 4.9, 1.0], dtype=np.float32)
    pick = GreedyPick({}, 3, Penalties(params(temperature=0, presence_penalty=1.0)))
    first = pick.pick(pointer(logits))
    pick.took(first)
    assert (first, pick.pick(pointer(logits))) == (0, 1)
    assert logits.tolist() == pytest.approx([5.0, 4.9, 1.0]), "the model's logits were changed"
