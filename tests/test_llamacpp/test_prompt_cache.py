"""The set-aside prompt cache's bookkeeping: longest shared prefix, byte budget, least recently used."""

from __future__ import annotations

import random

from asgi_llm.engines.llamacpp.prompt_cache import PromptCache, common_prefix


def test_the_longest_shared_prefix_wins() -> None:
    cache = PromptCache(budget=100)
    cache.put([1, 2, 3, 4], "a", 10)
    cache.put([1, 2, 9], "b", 10)
    saved, length = cache.best([1, 2, 3, 4, 5])
    assert saved is not None and (saved.state, length) == ("a", 4)
    saved, length = cache.best([1, 2, 9, 9])
    assert saved is not None and (saved.state, length) == ("b", 3)
    assert cache.best([7, 8]) == (None, 0)


def test_the_least_recently_used_goes_first_to_stay_within_the_budget() -> None:
    cache = PromptCache(budget=30)
    for n, state in enumerate("abc"):
        cache.put([n, n], state, 10)
    a, _ = cache.best([0, 0])
    assert a is not None
    cache.used(a)  # b is now the oldest
    cache.put([3, 3], "d", 10)
    assert sorted(s.state for s in cache._saved.values()) == ["a", "c", "d"]
    assert (len(cache), cache.size) == (3, 30)


def test_a_state_over_the_whole_budget_is_not_kept() -> None:
    cache = PromptCache(budget=30)
    cache.put([1], "a", 10)
    assert cache.put([2], "huge", 31) is False
    assert (len(cache), cache.size) == (1, 10)


def test_a_saved_prompt_that_a_new_one_extends_is_replaced_by_it() -> None:
    cache = PromptCache(budget=100)
    cache.put([1, 2, 3], "turn 1", 10)
    cache.put([1, 2, 3, 4, 5], "turn 2", 20)
    assert [s.state for s in cache._saved.values()] == ["turn 2"] and cache.size == 20
    assert cache.holds([1, 2, 3]) and cache.holds([1, 2, 3, 4, 5]) and not cache.holds([1, 2, 3, 4, 5, 6])


def test_common_prefix_agrees_with_a_token_by_token_count() -> None:
    def counted(a: list[int], b: list[int]) -> int:
        n = 0
        while n < min(len(a), len(b)) and a[n] == b[n]:
            n += 1
        return n

    rng = random.Random(7)
    for _ in range(500):
        a = [rng.randrange(3) for _ in range(rng.randrange(40))]
        b = a[: rng.randrange(len(a) + 1)] + [rng.randrange(3) for _ in range(rng.randrange(40))]
        assert common_prefix(a, b) == counted(a, b) == common_prefix(b, a)
    assert common_prefix([], [1]) == 0 and common_prefix([1, 2], [1, 2]) == 2


def test_of_equally_good_saved_prompts_the_most_recently_used_wins() -> None:
    cache = PromptCache(budget=100)
    cache.put([1, 2, 3, 7], "older", 10)
    cache.put([1, 2, 3, 8], "newer", 10)
    saved, length = cache.best([1, 2, 3, 9])
    assert saved is not None and (saved.state, length) == ("newer", 3)
    older, _ = cache.best([1, 2, 3, 7])
    assert older is not None
    cache.used(older)
    saved, _ = cache.best([1, 2, 3, 9])
    assert saved is not None and saved.state == "older"


def test_a_saved_prompt_chosen_for_a_restore_is_never_dropped_by_the_save_before_it() -> None:
    """The bug that leaked slots: the save that sets a sequence's old cache aside evicted the
    saved prompt chosen to replace it, and marking that one used raised KeyError."""
    cache = PromptCache(budget=20)
    cache.put([1, 2, 3], "chosen", 10)
    cache.put([4, 5, 6], "other", 10)
    chosen, _ = cache.best([1, 2, 3, 4])
    assert chosen is not None
    assert cache.put([7, 8, 9], "set aside", 10, keep=chosen)
    assert chosen in cache and cache.consistent()
    assert sorted(s.state for s in cache._saved.values()) == ["chosen", "set aside"]
    assert cache.put([9, 9], "too big beside it", 11, keep=chosen) is False  # refused, not evicting it
    assert chosen in cache and cache.consistent()
    cache.used(chosen)
    cache.put([5, 5], "a", 10)
    assert chosen in cache  # most recently used: the other one went
    cache.put([6, 6], "b", 10)
    assert chosen not in cache and cache.consistent()
    cache.used(chosen)  # dropped meanwhile: nothing happens, nothing raises
