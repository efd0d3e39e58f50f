"""What a model wrote before, for drafting: the token that followed each run of `KEY` tokens in
the replies its finished sequences wrote, shared by every sequence of the model.

A sequence's own lookup (lookup.py) finds what it has seen in its prompt and output. What it has
not seen but the model wrote before for another request (the same JSON scaffolding, a reply
regenerated, an agent's edit of a file it edited before) only a memory across requests finds.
The key is long (`KEY` tokens), so a draft follows only where the context is the same as it was
then; a guess the model does not take costs its row, never the output, which the step's
verification keeps the model's own.

Bounded: two generations of at most half the capacity each; when the newer fills, the older is
dropped, so the latest replies are remembered. Keys are the hashes of the token runs, so an entry
costs a small integer key and value, not a tuple. Pure: token ids in, token ids out.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["KEY", "ReplyMemory"]

KEY = 12
"""Tokens of context a remembered token follows: long enough that a match means the same context."""


class ReplyMemory:
    """The next token after each `KEY`-token run of the replies learned, at most `capacity` runs."""

    def __init__(self, capacity: int) -> None:
        self._half = max(1, capacity // 2)
        self._newer: dict[int, int] = {}
        self._older: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self._newer) + len(self._older)

    def learn(self, tokens: Sequence[int]) -> None:
        """A reply's tokens, after the `KEY` tokens before it (its prompt's end)."""
        newer = self._newer
        for end in range(KEY, len(tokens)):
            newer[hash(tuple(tokens[end - KEY : end]))] = tokens[end]
            if len(newer) >= self._half:
                self._older, self._newer = newer, {}
                newer = self._newer

    def follow(self, ending: Sequence[int], most: int) -> list[int]:
        """Up to `most` tokens that followed `ending`'s last `KEY` tokens, each then the last of
        the run the next one followed; none where that context was never written."""
        window = list(ending[-KEY:])
        if len(window) < KEY:
            return []
        out: list[int] = []
        while len(out) < most:
            key = hash(tuple(window[-KEY:]))
            token = self._newer.get(key)
            if token is None:
                token = self._older.get(key)
                if token is None:
                    break
            out.append(token)
            window.append(token)
        return out
