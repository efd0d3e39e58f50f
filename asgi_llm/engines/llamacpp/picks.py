"""The next token read straight from the logits with numpy, for the sampler chains most requests
use. llama.cpp's samplers first copy the whole vocabulary into a candidate array and take every
exponential one at a time. Over SmolLM2's 49,152 tokens, timed right after a decode as in
serving (the logits row cold in cache), llama.cpp's chain takes 200 µs for greedy and 490–510
µs for temperature sampling; these take 130 µs and 355–360 µs (9 µs and 78–93 µs with the row
hot in cache, where the chain takes 90 µs and 410–480).

Same rules in the same order as the chain in `sampling._chain`: the client's bias, top_p (the
most likely tokens until their probabilities reach p, at temperature 1), min_p (tokens at least
min_p times as likely as the most likely one), temperature, then one draw; repetition,
frequency and presence penalties over the last `PENALTY_WINDOW` tokens taken come right after
the bias, as llama.cpp's penalties sampler applies them. Chains with top_k stay with llama.cpp,
which is fast there: it cuts the candidates first.

Every pick is total over the parameters the protocols allow (see `bounded`): it never divides by
zero, never computes a NaN and always returns a token. Where the client's bias and the penalties
rule out every token, the model's own most likely token is taken.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections import Counter, deque
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from ...core.requests import SamplingParams

__all__ = [
    "PENALTY_WINDOW",
    "GreedyPick",
    "Penalties",
    "SampledPick",
    "bounded",
    "fast_pick",
    "nucleus",
    "penalized",
    "top_k",
    "top_rows",
]

PENALTY_WINDOW = 64  # tokens the penalties look back over

# Past these a parameter acts as at them. A logit of a model (under 100; these allow 1e4) and the
# client's bias stay below 3.3e8 through the penalties, where llama.cpp's bucket sort for top_k and
# top_p (which reads a logit times 6.4 as an int) still puts them in order, and finite through the
# temperature, in float32 and in llama.cpp's chain (which divides the logits themselves by it).
_COLDEST = 1e-20  # a temperature above 0 but below this samples as at it: the top token, or a draw among equals
_FLOAT32_ZERO = 2.0**-150  # half float32's least above 0, and all below it, round to 0
_HOTTEST = float(np.finfo(np.float32).max)  # the flattest draw: every token left in equally
_REPEAT = (1e-3, 1e3)  # a thousandfold already rules a repeated token in (or out)
_PENALTY = 1e6  # frequency and presence, either sign

_BLOCK = 512  # a full-vocabulary draw finds its block of tokens first, then the token in it
_NUCLEUS_FLOORS = (1e-2, 1e-4, 1e-7, 0.0)  # relative to the top token's weight


class Penalties:
    """llama.cpp's penalties sampler: each token among the last `PENALTY_WINDOW` taken has its
    logit divided by the repeat penalty (multiplied, where it is not positive), then lowered by
    the frequency penalty per occurrence and the presence penalty once."""

    def __init__(self, params: SamplingParams) -> None:
        params = bounded(params)
        self._repeat = np.float32(params.repeat_penalty)
        self._frequency = np.float32(params.frequency_penalty)
        self._presence = np.float32(params.presence_penalty)
        self._recent: deque[int] = deque()
        self._counts: Counter[int] = Counter()

    def took(self, token: int) -> None:
        self._counts[token] += 1
        if len(self._recent) >= PENALTY_WINDOW:
            oldest = self._recent.popleft()
            self._counts[oldest] -= 1
            if not self._counts[oldest]:
                del self._counts[oldest]
        self._recent.append(token)

    def ids(self) -> np.ndarray:
        return np.fromiter(self._counts, dtype=np.intp, count=len(self._counts))

    def apply(self, values: np.ndarray) -> None:
        if not self._counts:
            return
        ids = self.ids()
        counts = np.fromiter(self._counts.values(), dtype=np.float32, count=len(self._counts))
        logits = values[ids]
        logits = np.where(logits <= 0, logits * self._repeat, logits / self._repeat)
        values[ids] = logits - (counts * self._frequency + self._presence)


class _Adjusted:
    """The logits of one row with the client's bias added and the penalties applied, in place for
    the length of a pick and put back after: a copy of the whole row would cost more than the
    pick (the model's logits must stay as they are, for logprobs)."""

    def __init__(self, bias: Mapping[int, float], n_vocab: int, penalties: Penalties | None = None) -> None:
        self.n_vocab = n_vocab
        self.penalties = penalties
        self._ids = np.fromiter(bias, dtype=np.intp, count=len(bias))
        self._bias = np.fromiter(bias.values(), dtype=np.float32, count=len(bias))

    @contextlib.contextmanager
    def values(self, logits: Any) -> Iterator[np.ndarray]:
        values = np.ctypeslib.as_array(logits, shape=(self.n_vocab,))
        touched = self._ids if self.penalties is None else np.union1d(self._ids, self.penalties.ids())
        if not len(touched):
            yield values
            return
        kept = values[touched]
        try:
            values[self._ids] += self._bias
            if self.penalties is not None:
                self.penalties.apply(values)
            yield values
        finally:
            values[touched] = kept

    def took(self, token: int) -> None:
        if self.penalties is not None:
            self.penalties.took(token)


class GreedyPick:
    """The highest logit after bias and penalties: what llama.cpp's samplers before greedy, and
    greedy, pick (the first of equal highs)."""

    def __init__(self, bias: Mapping[int, float], n_vocab: int, penalties: Penalties | None = None) -> None:
        self._adjusted = _Adjusted(bias, n_vocab, penalties)
        self.plain = not bias and penalties is None
        """Whether it picks the model's own top logit (no bias, no penalties): a scheduler's one
        argmax over many rows picks as it does."""

    def pick(self, logits: Any) -> int:
        with self._adjusted.values(logits) as values:
            token = int(values.argmax())
            if values[token] != -np.inf:
                return token
        return _unadjusted_best(logits, self._adjusted.n_vocab)

    def took(self, token: int) -> None:
        """`token` is the output's next, whoever chose it (the penalties count it)."""
        self._adjusted.took(token)


def top_rows(values: np.ndarray, rows: np.ndarray) -> list[int]:
    """The top token of each of `rows` (indices into `values`, a logits row each), in one argmax
    over the rows from the least of them to the greatest: for each, what a plain `GreedyPick`
    picks (the first of equal highs; in a row of -inf alone, the first token)."""
    first = int(rows.min())
    picked: list[int] = values[first : int(rows.max()) + 1].argmax(axis=1)[rows - first].tolist()
    return picked


def _unadjusted_best(logits: Any, n_vocab: int) -> int:
    """The model's own most likely token: the pick when the bias and the penalties leave none."""
    return int(np.ctypeslib.as_array(logits, shape=(n_vocab,)).argmax())


def nucleus(values: np.ndarray, top: float, p: float) -> np.ndarray:
    """Ids of the fewest most likely tokens whose probabilities (at temperature 1) add up to at
    least `p`, most likely first. Only tokens above a floor are sorted: once those above it hold
    `p` of the whole, the answer lies among them."""
    weights = np.exp(values - np.float32(top))
    needed = p * float(weights.sum(dtype=np.float64))
    for floor in _NUCLEUS_FLOORS:
        ids = np.flatnonzero(weights >= floor)
        if floor == 0.0 or float(weights[ids].sum(dtype=np.float64)) >= needed:
            break
    ordered = ids[np.argsort(-values[ids], kind="stable")]
    running = np.cumsum(weights[ordered], dtype=np.float64)
    last = min(int(np.searchsorted(running, needed, side="left")), len(ordered) - 1)
    return ordered[: last + 1]


class SampledPick:
    """Temperature sampling, with top_p and min_p, from a seeded generator of its own."""

    def __init__(self, params: SamplingParams, n_vocab: int, seed: int, penalties: Penalties | None = None) -> None:
        params = bounded(params)
        self._adjusted = _Adjusted(dict(params.logit_bias or {}), n_vocab, penalties)
        self._temperature = np.float32(params.temperature)  # 0: the top token (`fast_pick` gives a GreedyPick then)
        self._top_p = params.top_p
        self._min_p = params.min_p
        self._random = np.random.Generator(np.random.PCG64(seed))
        self._weights = np.empty(n_vocab, dtype=np.float32)
        self._starts = np.arange(0, n_vocab, _BLOCK)

    def pick(self, logits: Any) -> int:
        with self._adjusted.values(logits) as values:
            top = float(values.max())
            if math.isfinite(top) and self._temperature:
                ids = self._kept(values, top)
                if ids is not None:
                    return int(ids[self._draw(np.exp((values[ids] - np.float32(top)) / self._temperature))])
                np.subtract(values, np.float32(top), out=self._weights)
            elif top != -math.inf:  # greedy, or an infinite logit wins
                return int(values.argmax())
        if top == -math.inf:  # the bias and the penalties rule out every token
            return _unadjusted_best(logits, self._adjusted.n_vocab)
        weights = self._weights
        if self._temperature != 1:
            np.divide(weights, self._temperature, out=weights)
        np.exp(weights, out=weights)
        return self._draw_blocked(weights)

    def took(self, token: int) -> None:
        """`token` is the output's next, whoever chose it (the penalties count it)."""
        self._adjusted.took(token)

    def kept(self, logits: Any) -> np.ndarray | None:
        """The ids top_p and min_p leave to draw from; None when they leave every token (or the
        bias and the penalties none)."""
        with self._adjusted.values(logits) as values:
            top = float(values.max())
            return self._kept(values, top) if math.isfinite(top) else None

    def _kept(self, values: np.ndarray, top: float) -> np.ndarray | None:
        ids: np.ndarray | None = None
        if self._top_p < 1.0:
            ids = nucleus(values, top, self._top_p)
        if self._min_p > 0.0:
            floor = np.float32(top + math.log(self._min_p))
            ids = np.flatnonzero(values >= floor) if ids is None else ids[values[ids] >= floor]
        return ids

    def _draw(self, weights: np.ndarray) -> int:
        running = np.cumsum(weights, dtype=np.float64)
        return _landing(running, self._random.random() * running[-1], weights)

    def _draw_blocked(self, weights: np.ndarray) -> int:
        """A draw over the whole vocabulary without a cumulative sum over all of it (the slow
        part): the block the draw lands in, then the token within the block."""
        sums = np.add.reduceat(weights, self._starts, dtype=np.float64)
        blocks = np.cumsum(sums)
        target = self._random.random() * blocks[-1]
        block = _landing(blocks, target, sums)
        start = block * _BLOCK
        inside = weights[start : start + _BLOCK]
        before = blocks[block - 1] if block else 0.0
        return start + _landing(np.cumsum(inside, dtype=np.float64), target - before, inside)


def _landing(running: np.ndarray, target: float, weights: np.ndarray) -> int:
    """The first entry whose running total passes `target`; never one of weight 0 (rounding
    can put the target at the very end) while any has more."""
    index = int(np.searchsorted(running, target, side="right"))
    if index >= len(running) or weights[index] <= 0:
        heavy = np.flatnonzero(weights > 0)
        index = int(heavy[-1]) if len(heavy) else int(weights.argmax())
    return index


def penalized(params: SamplingParams) -> bool:
    """Whether any penalty applies (then a pick keeps a history of the tokens taken)."""
    return params.repeat_penalty != 1.0 or bool(params.frequency_penalty) or bool(params.presence_penalty)


def bounded(params: SamplingParams) -> SamplingParams:
    """`params` as the samplers apply them. A temperature that float32 rounds to 0 (up to
    7e-46), like 0 itself, picks the top token; one above it is held between 1e-20 and
    float32's largest. The repeat penalty is held to [1e-3, 1e3] and the frequency and presence
    penalties to ±1e6, where their arithmetic stays in range; top_p and min_p to [0, 1]. A NaN,
    which only an unchecked field lets in, changes nothing."""
    return dataclasses.replace(
        params,
        temperature=_temperature(params.temperature),
        top_p=_within(params.top_p, 0.0, 1.0, 1.0),
        min_p=_within(params.min_p, 0.0, 1.0, 0.0),
        top_k=max(params.top_k, 0),
        repeat_penalty=_within(params.repeat_penalty, *_REPEAT, 1.0),
        frequency_penalty=_within(params.frequency_penalty, -_PENALTY, _PENALTY, 0.0),
        presence_penalty=_within(params.presence_penalty, -_PENALTY, _PENALTY, 0.0),
    )


def _temperature(value: float) -> float:
    if math.isnan(value) or value <= _FLOAT32_ZERO:
        return 0.0
    return min(max(value, _COLDEST), _HOTTEST)


def _within(value: float, low: float, high: float, neutral: float) -> float:
    return neutral if math.isnan(value) else min(max(value, low), high)


def top_k(params: SamplingParams, n_vocab: int) -> int:
    """The top_k that cuts anything: 0 (none) where it would keep the whole vocabulary."""
    return params.top_k if 0 < params.top_k < n_vocab else 0


def fast_pick(params: SamplingParams, n_vocab: int, seed: int) -> GreedyPick | SampledPick | None:
    """The numpy pick for these parameters; None where llama.cpp's chain must do it."""
    params = bounded(params)
    penalties = Penalties(params) if penalized(params) else None
    if params.temperature == 0:
        return GreedyPick(dict(params.logit_bias or {}), n_vocab, penalties)
    if top_k(params, n_vocab):
        return None
    return SampledPick(params, n_vocab, seed, penalties)
