"""Prompt lookup: draft a sequence's next tokens from its own past (the prompt and the output so
far), for the scheduler to verify in the same batched decode as the rest of a step.

Where a reply repeats what it has seen (an edit of code it was given, a quote, a JSON key it
wrote before), the tokens that followed the last occurrence of its latest few tokens are a
cheap and often right guess. The index grows by one entry per size per token taken, so a
draft costs the same at any context length: no rescans of the history. With a model's
`ReplyMemory` (reply_memory.py) it also recalls what the model wrote before after the same long
context (`recall`), and the sequence's reply joins the memory when it ends (`remember`).

Pure: token ids in, token ids out.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from .reply_memory import KEY, ReplyMemory

__all__ = ["AGREEMENT", "PromptLookup"]

AGREEMENT = 64
"""The most tokens of agreement `follows` counts back: past it, a match is as good as longer."""


class PromptLookup:
    """The last place each n-gram of the history ended, for every size from `longest` down to
    `shortest`: a draft follows the longest n-gram that ends the history and occurred before.
    With a `memory`, what the model wrote before after the history's long ending is recalled."""

    def __init__(
        self,
        history: Iterable[int] = (),
        *,
        longest: int = 4,
        shortest: int = 2,
        memory: ReplyMemory | None = None,
    ) -> None:
        if not 1 <= shortest <= longest:
            raise ValueError("n-gram sizes must satisfy 1 <= shortest <= longest")
        self._sizes = range(longest, shortest - 1, -1)
        self._tokens: list[int] = []
        self._ends: dict[tuple[int, ...], int] = {}  # n-gram -> the index just after its latest earlier occurrence
        self.extend(history)
        self._memory = memory
        self._reply = len(self._tokens)  # where the reply begins: what `remember` teaches the memory

    def __len__(self) -> int:
        return len(self._tokens)

    def extend(self, tokens: Iterable[int]) -> None:
        """Tokens the sequence took, in order (the accepted ones only: drafts are never added)."""
        for token in tokens:
            self._index_ending_here()
            self._tokens.append(token)

    def draft(self, most: int, after: Sequence[int] = ()) -> list[int]:
        """Up to `most` tokens that followed the latest earlier occurrence of the history's
        longest possible ending n-gram; none where no ending n-gram occurred before. With `after`
        (tokens drafted already, which the history does not hold) the ending is of both."""
        return self.follows(most, after)[0]

    def follows(self, most: int, after: Sequence[int] = ()) -> tuple[list[int], int]:
        """`draft`, and how many tokens (at most `AGREEMENT`) the place it follows agrees with the
        history's ending: the longer, the likelier the model goes on as it did there."""
        if most <= 0:
            return [], 0
        tokens = self._tokens
        ending = (*tokens[-self._sizes[0] :], *after)
        for size in self._sizes:
            if size > len(ending):
                continue
            start = self._ends.get(ending[-size:])
            if start is not None:
                return tokens[start : start + most], self._agreement(start, after)
        return [], 0

    def _agreement(self, start: int, after: Sequence[int]) -> int:
        """How many tokens before `start` equal the ones ending the history with `after`."""
        tokens, agreed = self._tokens, 0
        ending = len(tokens) + len(after)
        while agreed < AGREEMENT and agreed < start and agreed < ending:
            back = ending - 1 - agreed
            if tokens[start - 1 - agreed] != (tokens[back] if back < len(tokens) else after[back - len(tokens)]):
                break
            agreed += 1
        return agreed

    def recall(self, most: int, after: Sequence[int] = ()) -> list[int]:
        """Up to `most` tokens the model wrote before after the history's last `KEY` tokens (with
        `after`), from its memory of replies; none without one or where it knows none."""
        if self._memory is None or most <= 0:
            return []
        return self._memory.follow((*self._tokens[-KEY:], *after), most)

    def remember(self) -> None:
        """The sequence ended: its reply (with the context it began in) joins the memory, once."""
        if self._memory is not None:
            self._memory.learn(self._tokens[max(0, self._reply - KEY) :])
            self._memory = None

    def _index_ending_here(self) -> None:
        """Before a token is appended: record that each n-gram ending the history so far is
        followed from here on. Done one token late, so the n-gram ending the whole history
        points to its previous occurrence, not to itself."""
        tokens, end = self._tokens, len(self._tokens)
        for size in self._sizes:
            if size <= end:
                self._ends[tuple(tokens[end - size :])] = end
