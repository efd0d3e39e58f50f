"""The samplers over the extremes the protocols allow (hypothesis): subnormal, tiny and huge
temperatures (Ollama's has no upper bound), top_p and min_p at 0 and 1, top_k from 0 past the
vocabulary, penalties at their bounds and past them (Ollama's are unchecked, NaN included), and a
bias of ±100 (or -inf) on every token. The numpy picks and llama.cpp's chain (as `Sampling` builds
it) both always give a token of the vocabulary, never one the bias and penalties rule out while
another is left, the top token where the temperature rounds to 0 in float32, nothing drawn that
float32 gives no weight, and no NaN or RuntimeWarning (warnings are errors) on the way. Where the
bias rules out every token, the pick is the model's own favourite."""

from __future__ import annotations

import ctypes
import dataclasses
import math
from collections import Counter
from typing import Any

import llama_cpp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from asgi_llm.core import SamplingParams
from asgi_llm.core.events import TokenLogprob
from asgi_llm.engines.llamacpp.picks import (
    PENALTY_WINDOW,
    GreedyPick,
    SampledPick,
    bounded,
    fast_pick,
    penalized,
    top_k,
)
from asgi_llm.engines.llamacpp.sampling import _chain, logprob  # the chain Sampling runs, without a model

FLOAT32_MAX = float(np.finfo(np.float32).max)
UNDERFLOW = 105.0  # float32's exp is 0 below -104: a token this many temperatures below the top has no weight
CHECKS = settings(max_examples=400, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])

TINY = [5e-324, 2.76e-272, 1e-300, 7e-46, 1e-45, 1.5e-45, 1e-38, 1e-30, 1e-20]
temperatures = st.one_of(
    st.sampled_from([0.0, *TINY, 1e-6, 0.7, 1.0, 2.0, 1e10, 1e38, 1e39, 1e300, math.inf]),
    st.floats(min_value=0.0, allow_nan=False, allow_infinity=True, allow_subnormal=True),
)
unit = st.one_of(
    st.sampled_from([0.0, 5e-324, 1e-45, 1e-30, 1e-7, 0.5, 0.95, 0.9999999, 1.0]),
    st.floats(min_value=0.0, max_value=1.0, allow_subnormal=True),
)
repeats = st.one_of(
    st.sampled_from([5e-324, 1e-300, 1e-45, 1e-3, 0.5, 1.0, 1.3, 2.0, 1e3, 1e300, math.inf]),
    st.floats(min_value=0.0, exclude_min=True, allow_infinity=True, allow_subnormal=True),
)
penalties = st.one_of(
    st.sampled_from([-2.0, -1.0, 0.0, 0.5, 2.0]),
    st.floats(min_value=-2.0, max_value=2.0),
    st.floats(allow_nan=True, allow_infinity=True),  # Ollama checks neither range nor NaN
)


@st.composite
def vocabularies(draw: st.DrawFn) -> np.ndarray:
    """A logits row: flat, peaked or wide, with ties, and some tokens banned (-inf) at times."""
    n = draw(st.sampled_from([1, 2, 3, 7, 64, 511, 512, 513, 1100]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    spread = draw(st.sampled_from([0.0, 1e-30, 1e-6, 1.0, 5.0, 30.0, 1e4]))
    logits = rng.standard_normal(n) * spread + draw(st.sampled_from([0.0, -50.0, 40.0]))
    if draw(st.booleans()):
        logits = np.round(logits)  # ties
    if draw(st.booleans()):
        logits[rng.random(n) < draw(st.sampled_from([0.1, 0.9, 1.0]))] = -np.inf
    return logits.astype(np.float32)


@st.composite
def biases(draw: st.DrawFn, n: int) -> tuple[tuple[int, float], ...]:
    kind = draw(st.sampled_from(["none", "all", "some"]))
    if kind == "none":
        return ()
    if kind == "all":
        value = draw(st.sampled_from([100.0, -100.0, -math.inf]))
        return tuple((token, value) for token in range(n))
    values = st.one_of(st.sampled_from([100.0, -100.0, -math.inf]), st.floats(-100.0, 100.0))
    tokens = draw(st.lists(st.integers(0, n - 1), unique=True, max_size=min(n, 20)))
    return tuple((token, draw(values)) for token in tokens)


@st.composite
def cases(draw: st.DrawFn) -> tuple[np.ndarray, SamplingParams, list[int]]:
    """Logits, parameters and the tokens taken so far (the penalties' history)."""
    logits = draw(vocabularies())
    n = len(logits)
    params = SamplingParams(
        temperature=draw(temperatures),
        top_p=draw(unit),
        min_p=draw(unit),
        top_k=draw(st.one_of(st.sampled_from([0, 1, 2, n - 1, n, n + 1, 2**31, 10**30]), st.integers(0, n + 5))),
        repeat_penalty=draw(st.one_of(st.just(1.0), repeats)),
        frequency_penalty=draw(st.one_of(st.just(0.0), penalties)),
        presence_penalty=draw(st.one_of(st.just(0.0), penalties)),
        logit_bias=draw(biases(n)),
    )
    history = draw(st.lists(st.integers(0, n - 1), max_size=PENALTY_WINDOW + 20))
    return logits, params, history


def pointer(values: np.ndarray) -> Any:
    return values.ctypes.data_as(ctypes.POINTER(ctypes.c_float))


def adjusted(logits: np.ndarray, params: SamplingParams, history: list[int]) -> np.ndarray:
    """The logits after the bias and llama.cpp's penalties, one token at a time in float32."""
    params = bounded(params)
    values = logits.copy()
    for token, bias in params.logit_bias:
        values[token] = values[token] + np.float32(bias)
    if penalized(params):
        repeat = np.float32(params.repeat_penalty)
        frequency, presence = np.float32(params.frequency_penalty), np.float32(params.presence_penalty)
        for token, count in Counter(history[-PENALTY_WINDOW:]).items():
            value = values[token] * repeat if values[token] <= 0 else values[token] / repeat
            values[token] = value - (np.float32(count) * frequency + presence)
    return values


def rounds_to_zero(temperature: float) -> bool:
    """Whether float32 (a C float, as llama.cpp takes it) holds `temperature` as 0."""
    return ctypes.c_float(temperature).value == 0


def check(token: int, logits: np.ndarray, params: SamplingParams, history: list[int]) -> None:
    """What every pick must be, whichever sampler made it."""
    n = len(logits)
    assert 0 <= token < n
    values = adjusted(logits, params, history).astype(np.float64)  # compared with Python floats
    assert not np.isnan(values).any(), "the bias or the penalties made a NaN"
    top = float(values.max())
    if top == -math.inf:
        assert logits[token] == logits.max(), "every token ruled out: the model's own favourite"
        return
    assert values[token] > -np.inf, "a token the bias or the penalties rule out"
    temperature = bounded(params).temperature
    if rounds_to_zero(params.temperature):
        assert temperature == 0
        assert token == int(values.argmax()), "a temperature that rounds to 0 is greedy"
        return
    assert values[token] >= top - UNDERFLOW * temperature - 1e-6 * abs(top), "a token without weight was drawn"
    if float(np.float32(params.min_p)) > 0:
        floor = top + math.log(bounded(params).min_p)
        assert values[token] >= floor - 1e-6 * (1 + abs(top) + abs(floor))
    allowed = int(np.count_nonzero(values > -np.inf))
    if bounded(params).top_p * allowed < 0.99:  # the top token alone holds p
        assert values[token] == top
    k = top_k(bounded(params), n)
    if k:
        assert values[token] >= np.sort(values)[-k]


@given(cases())
@CHECKS
def test_the_numpy_picks_are_total(case: tuple[np.ndarray, SamplingParams, list[int]]) -> None:
    logits, params, history = case
    pick = fast_pick(params, len(logits), seed=7)
    if pick is None:
        assert top_k(bounded(params), len(logits)) and not rounds_to_zero(params.temperature)
        return
    assert isinstance(pick, GreedyPick) == rounds_to_zero(params.temperature)
    before = logits.copy()
    for token in history:
        pick.took(token)
    for _ in range(3):
        check(pick.pick(pointer(logits)), logits, params, history)
    if isinstance(pick, SampledPick):
        kept = pick.kept(pointer(logits))
        assert kept is None or (len(kept) and np.all((kept >= 0) & (kept < len(logits))))
    assert np.array_equal(logits, before), "the model's logits were changed"


@given(cases())
@CHECKS
def test_llama_cpps_chain_is_total(case: tuple[np.ndarray, SamplingParams, list[int]]) -> None:
    """The chain `Sampling` falls back on (top_k, and under a grammar), fed the same extremes.
    A bias that rules out every token reaches it only under a grammar, where `Sampling` checks
    its pick (tests/test_e2e/test_sampler_extremes_model.py): left out here."""
    logits, params, history = case
    n = len(logits)
    values = adjusted(logits, params, history).astype(np.float64)
    if values.max() == -np.inf:
        return
    chain = _chain(params, 7, n)
    for token in history:
        llama_cpp.llama_sampler_accept(chain.sampler, token)
    data = np.zeros(n, dtype=[("id", np.int32), ("logit", np.float32), ("p", np.float32)])
    data["id"] = np.arange(n)
    data["logit"] = logits
    view = llama_cpp.llama_token_data_array(
        data=data.ctypes.data_as(llama_cpp.llama_token_data_p), size=n, selected=-1, sorted=False
    )
    llama_cpp.llama_sampler_apply(chain.sampler, ctypes.byref(view))
    assert 0 <= view.selected < view.size
    left = data[: view.size]
    assert not np.isnan(left["logit"]).any() and not np.isnan(left["p"]).any(), "the chain computed a NaN"
    token = int(data["id"][view.selected])
    assert values[token] > -np.inf
    if rounds_to_zero(params.temperature):
        assert token == int(values.argmax())
        return
    top = float(values.max())
    temperature = bounded(params).temperature
    assert values[token] >= top - UNDERFLOW * temperature - 1e-6 * abs(top)
    k = top_k(bounded(params), n)
    if k:
        assert values[token] >= np.sort(values)[-k]


@given(
    temperature=st.one_of(st.sampled_from([math.nan, math.inf, *TINY]), st.floats()),
    unit_value=st.one_of(st.sampled_from([math.nan, -1.0, 2.0]), st.floats()),
    repeat=st.one_of(st.sampled_from([math.nan, 0.0, math.inf]), st.floats()),
    penalty=st.floats(),
    k=st.integers(-(2**40), 2**40),
)
@CHECKS
def test_the_bounds_are_finite_and_leave_ordinary_values_alone(
    temperature: float, unit_value: float, repeat: float, penalty: float, k: int
) -> None:
    params = SamplingParams(
        temperature=temperature, top_p=unit_value, min_p=unit_value, top_k=k, repeat_penalty=repeat,
        frequency_penalty=penalty, presence_penalty=penalty,
    )  # fmt: skip
    held = bounded(params)
    assert bounded(held) == held
    fields = ("temperature", "top_p", "min_p", "repeat_penalty", "frequency_penalty", "presence_penalty")
    assert all(math.isfinite(getattr(held, name)) for name in fields)
    assert (held.temperature == 0) == (math.isnan(temperature) or temperature <= 0 or rounds_to_zero(temperature))
    assert held.temperature == 0 or 1e-20 <= held.temperature <= FLOAT32_MAX
    assert 0 <= held.top_p <= 1 and 0 <= held.min_p <= 1 and held.top_k >= 0
    assert 1e-3 <= held.repeat_penalty <= 1e3 and abs(held.frequency_penalty) <= 1e6
    if 1e-20 <= temperature <= 1e30:
        assert held.temperature == temperature
    if 0 <= unit_value <= 1:
        assert held.top_p == held.min_p == unit_value
    if 1e-3 <= repeat <= 1e3:
        assert held.repeat_penalty == repeat
    if -2 <= penalty <= 2:
        assert held.frequency_penalty == held.presence_penalty == penalty


class Vocabulary:
    """What `logprob` reads of a model."""

    def __init__(self, n_vocab: int) -> None:
        self.n_vocab = n_vocab

    def piece(self, token: int) -> bytes:
        return f"<{token}>".encode()


@given(logits=vocabularies(), top_n=st.integers(0, 25), data=st.data())
@CHECKS
def test_logprobs_are_finite_or_minus_infinity(logits: np.ndarray, top_n: int, data: st.DataObject) -> None:
    if logits.max() == -np.inf:
        return  # a model gives some finite logit
    token = data.draw(st.integers(0, len(logits) - 1))
    read: TokenLogprob = logprob(Vocabulary(len(logits)), pointer(logits), token, b"t", top_n)  # type: ignore[arg-type]
    reported = [read.logprob, *(entry.logprob for entry in read.top)]
    assert read.logprob is not None and not any(math.isnan(value) for value in reported if value is not None)
    assert all(value is not None and value <= 1e-6 for value in reported)
    assert (read.logprob == -math.inf) == (logits[token] == -np.inf)
    assert len(read.top) == min(top_n, len(logits))
    assert math.fsum(math.exp(entry.logprob) for entry in read.top) <= 1 + 1e-5


@pytest.mark.parametrize("temperature", [1e300, math.inf])
def test_a_huge_temperature_draws_evenly_from_what_is_left(temperature: float) -> None:
    """Ollama takes any temperature: float32 makes 1e300 infinite, and -inf / inf is NaN."""
    logits = np.array([9.0, -np.inf, 0.0, -30.0, -np.inf, 4.0], dtype=np.float32)
    pick = fast_pick(SamplingParams(temperature=temperature, logit_bias=((5, -math.inf),)), len(logits), seed=3)
    assert isinstance(pick, SampledPick)
    seen = Counter(pick.pick(pointer(logits)) for _ in range(3000))
    assert set(seen) == {0, 2, 3}
    assert all(abs(count / 3000 - 1 / 3) < 0.05 for count in seen.values())


def test_a_bias_against_every_token_leaves_the_models_favourite() -> None:
    logits = np.array([1.0, 3.0, 2.0, 3.0], dtype=np.float32)
    banned = SamplingParams(temperature=0.8, logit_bias=tuple((token, -math.inf) for token in range(4)))
    assert SampledPick(banned, 4, seed=1).pick(pointer(logits)) == 1
    assert GreedyPick(dict(banned.logit_bias), 4).pick(pointer(logits)) == 1
    shifted = dataclasses.replace(banned, logit_bias=tuple((token, -100.0) for token in range(4)), temperature=0)
    assert GreedyPick(dict(shifted.logit_bias), 4).pick(pointer(logits)) == 1, "-100 on every token changes nothing"
