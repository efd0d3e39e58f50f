"""Sequence caches kept in host memory once their sequence goes to another prompt, so that the
next turn of a conversation whose sequence was taken meanwhile reads only what is new.

With more conversations than sequences, a sequence's cache is replaced whenever a new prompt
lands there; reading the conversation again costs every one of its tokens (3.5 ms each for the
packaged model on 2 cores). Saving a sequence's state takes about a millisecond per 7 MB and
putting it back as little, so a set-aside cache is worth keeping whenever it held a few tokens
more than what replaced it. Pure bookkeeping: the engine's backend saves and restores the states,
which are opaque here but for their size.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

__all__ = ["PromptCache", "SavedPrompt", "common_prefix"]


def common_prefix(a: list[int], b: list[int]) -> int:
    """How many tokens `a` and `b` share from the start: slices compared in C, halving the
    range, since a long conversation is compared with every saved prompt at each admission."""
    same = min(len(a), len(b))
    if a[:same] == b[:same]:
        return same
    low, high = 0, same  # a[:low] == b[:low]; a[:high] != b[:high]
    while high - low > 1:
        middle = (low + high) // 2
        if a[low:middle] == b[low:middle]:
            low = middle
        else:
            high = middle
    return low


@dataclass(eq=False)
class SavedPrompt:
    tokens: list[int]  # what the saved state holds, position by position (never changed)
    state: Any
    size: int  # bytes
    key: int = 0  # its place in the cache's order of use, given by `put`


class PromptCache:
    """Saved sequence states, the least recently used dropped first to stay within `budget`
    bytes; a saved prompt that another one extends is dropped, since the longer serves both.
    Its invariant, checked by `consistent`: `size` is the sum of the entries' sizes and at most
    `budget`."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.size = 0
        self._saved: OrderedDict[int, SavedPrompt] = OrderedDict()  # least recently used first
        self._keys = 0

    def __len__(self) -> int:
        return len(self._saved)

    def __contains__(self, saved: SavedPrompt) -> bool:
        return self._saved.get(saved.key) is saved

    def best(self, prompt: list[int]) -> tuple[SavedPrompt | None, int]:
        """The saved prompt sharing the longest prefix with `prompt`, and that length; of equally
        good ones the most recently used, which LRU eviction drops last."""
        found, length = None, 0
        for saved in reversed(self._saved.values()):
            shared = common_prefix(saved.tokens, prompt)
            if shared > length:
                found, length = saved, shared
        return found, length

    def holds(self, tokens: list[int]) -> bool:
        """Whether a saved prompt already starts with all of `tokens`."""
        return any(common_prefix(saved.tokens, tokens) == len(tokens) for saved in self._saved.values())

    def used(self, saved: SavedPrompt) -> None:
        """Mark `saved` the most recently used (nothing happens if it has been dropped meanwhile)."""
        if saved in self:
            self._saved.move_to_end(saved.key)

    def put(self, tokens: list[int], state: Any, size: int, *, keep: SavedPrompt | None = None) -> bool:
        """Keep `state` (of `tokens`), unless it alone is over the budget, or it would need
        `keep` (a saved prompt chosen and not yet restored) dropped to fit."""
        if size > self.budget - (keep.size if keep is not None and keep in self else 0):
            return False
        for key, saved in list(self._saved.items()):
            if saved is not keep and common_prefix(saved.tokens, tokens) == len(saved.tokens):
                self._drop(key)
        self._keys += 1
        saved = SavedPrompt(list(tokens), state, size, self._keys)
        self._saved[saved.key] = saved
        self.size += size
        while self.size > self.budget:
            oldest = next(key for key, s in self._saved.items() if s is not keep)
            self._drop(oldest)
        return True

    def clear(self) -> None:
        self._saved.clear()
        self.size = 0

    def consistent(self) -> bool:
        return self.size == sum(s.size for s in self._saved.values()) and 0 <= self.size <= self.budget

    def _drop(self, key: int) -> None:
        self.size -= self._saved.pop(key).size
