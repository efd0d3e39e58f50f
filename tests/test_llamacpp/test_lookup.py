"""Prompt lookup's drafts, against a brute-force reading of the same rule."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from asgi_llm.engines.llamacpp.lookup import AGREEMENT, PromptLookup


def rescanned(tokens: list[int], most: int, longest: int, shortest: int) -> list[int]:
    """The rule, by rescanning: the longest ending n-gram seen before; after its latest earlier occurrence."""
    for size in range(longest, shortest - 1, -1):
        if size > len(tokens):
            continue
        ending = tokens[-size:]
        for start in range(len(tokens) - size - 1, -1, -1):  # earlier occurrences, latest first
            if tokens[start : start + size] == ending:
                return tokens[start + size : start + size + most]
    return []


def followed(tokens: list[int], most: int, longest: int, shortest: int) -> tuple[list[int], int]:
    """The rule's draft, and how far back the place it follows agrees with the ending."""
    for size in range(longest, shortest - 1, -1):
        if size > len(tokens):
            continue
        for start in range(len(tokens) - size - 1, -1, -1):
            if tokens[start : start + size] == tokens[-size:]:
                end, agreed = start + size, size
                while agreed < min(end, AGREEMENT) and tokens[end - 1 - agreed] == tokens[-1 - agreed]:
                    agreed += 1
                return tokens[end : end + most], agreed
    return [], 0


@given(
    tokens=st.lists(st.integers(0, 4), max_size=60),
    most=st.integers(0, 8),
    sizes=st.tuples(st.integers(1, 5), st.integers(0, 3)),
    split=st.integers(0, 60),
)
def test_drafts_follow_the_latest_earlier_occurrence_of_the_longest_ending(
    tokens: list[int], most: int, sizes: tuple[int, int], split: int
) -> None:
    shortest, extra = sizes
    lookup = PromptLookup(tokens[:split], longest=shortest + extra, shortest=shortest)
    lookup.extend(tokens[split:])  # the prompt, then the output token by token: the same index
    assert len(lookup) == len(tokens)
    assert lookup.draft(most) == rescanned(tokens, most, shortest + extra, shortest)
    draft, agreed = lookup.follows(max(most, 1))
    assert (draft, agreed) == followed(tokens, max(most, 1), shortest + extra, shortest)


def test_a_repeated_passage_is_drafted_from_where_it_was_seen() -> None:
    passage = [10, 11, 12, 13, 14, 15, 16]
    lookup = PromptLookup([1, 2, *passage, 3, 4, 10, 11], longest=3, shortest=2)
    assert lookup.draft(4) == [12, 13, 14, 15]
    lookup.extend([12, 13])
    assert lookup.draft(8) == [14, 15, 16, 3, 4, 10, 11, 12]  # the trigram now: 11 12 13
    assert PromptLookup([1, 2, 3], longest=2, shortest=2).draft(4) == []  # nothing repeats


def test_the_agreement_counts_back_through_the_tokens_drafted_already() -> None:
    passage = list(range(10, 30))
    lookup = PromptLookup([1, *passage, 2, 3, 10, 11, 12], longest=3, shortest=2)
    assert lookup.follows(2) == ([13, 14], 3)  # 10 11 12 agree; before them 1 against 3
    assert lookup.follows(2, after=[13, 14, 15]) == ([16, 17], 6)  # drafted tokens count as the history's
    long = PromptLookup([*range(100), *range(100)], longest=4, shortest=2)
    assert long.follows(1) == ([0], AGREEMENT)  # a hundred tokens agree: counted up to AGREEMENT


def test_sizes_are_checked() -> None:
    with pytest.raises(ValueError, match="shortest"):
        PromptLookup(longest=2, shortest=3)
    with pytest.raises(ValueError, match="shortest"):
        PromptLookup(longest=2, shortest=0)
