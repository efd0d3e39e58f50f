"""A request's int64 seed, folded to the 32 bits llama.cpp takes: seeds below 2**32 are
themselves, and seeds that differ only in their high bits do not meet."""

from __future__ import annotations

from asgi_llm.core import SamplingParams
from asgi_llm.engines.llamacpp.sampling import _seed


def seed(value: int | None, index: int = 0) -> int:
    return _seed(SamplingParams(seed=value), index)


def test_a_seed_below_two_to_the_32_is_itself_plus_the_choices_index() -> None:
    assert [seed(7), seed(7, 2), seed(0), seed(2**32 - 1)] == [7, 9, 0, 2**32 - 1]


def test_seeds_differing_only_above_bit_32_differ() -> None:
    folded = {seed(high << 32 | 1) for high in range(4096)}
    assert len(folded) == 4096  # 1, 2**32 + 1, 2**33 + 1...: no two alike
    assert seed(2**32 + 1) != seed(1)


def test_every_int64_folds_to_32_bits_deterministically() -> None:
    for value in (-1, -(2**63), 2**63 - 1, -(2**31), 2**40 + 12345):
        assert 0 <= seed(value) < 2**32 and seed(value) == seed(value)
    assert seed(-1) != seed(2**32 - 1)  # not only the low half
    assert seed(2**63 - 1, 1) == seed(-(2**63))  # the choice after the last int64 wraps to the first


def test_without_a_seed_each_choice_draws_one() -> None:
    assert all(0 <= seed(None) < 2**32 for _ in range(10))
    assert len({seed(None) for _ in range(10)}) > 1
