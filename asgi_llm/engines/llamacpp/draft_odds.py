"""How likely a lookup draft's tokens are to be taken, by how long a match it follows: the
model-wide odds that choose how much of a draft a step decodes.

A lookup draft follows the latest earlier place where the history's last few tokens occurred.
Where the history and that place agree for dozens of tokens before the draft (a function being
copied, a paragraph being quoted), the model nearly always goes on as the place does; where only
the last two or three agree (a common phrase), it often does not. Measured over code edits,
quotes and chat with the packaged model: a first drafted token followed 57% of the time after a
match of 2, 78% after 4 to 9, 97% after 16 or more. Neither a sequence's own acceptance nor one
reach per sequence tells those apart, and a step pays for every drafted token it decodes: so the
odds are kept per class of match (its length's power of two), and per depth (the chance the
k-th drafted token is taken, given the ones before it were), and a draft is cut where its
next token is no longer worth what it adds to the step (`DraftPayoff.length`).

Pure: counts in, odds out; on the inference thread.
"""

from __future__ import annotations

__all__ = ["DraftOdds"]

DECAY = 0.99
"""The weight a judged draft keeps per newer one of its class and depth."""
LABELS = ("0", "1", "2-3", "4-7", "8-15", "16-31", "32-63", "64+")
"""Match lengths, one class each (a length's `bit_length`), as the operator's view names them."""
CLASSES = len(LABELS)
PRIOR = (0.5, 0.5, 0.65, 0.78, 0.85, 0.97, 0.97, 0.97)
"""Each class's odds before it is judged: the shares measured with the packaged model (above).
Starting at "always taken", a model's first requests paid for drafts after short matches until
their odds were learned. Replayed at this CPU's step costs (benchmarks/draft_bound.py's 15
replies, three runs), a first reply (a code edit) made 1.24-1.39× the plain rate so, against
1.04-1.23× from "always taken", and all 15 together 1.20-1.28× against 1.16-1.27×."""
PRIOR_WEIGHT = 2.0
"""Drafts' worth of weight the prior has: a model whose matches fare otherwise outweighs it
after a few drafts of a class."""


class DraftOdds:
    """Per class of match and per depth, the decayed share of drafted tokens taken where every
    one before them in their draft was; each begins at its `PRIOR`. A draft cut to nothing is
    judged all the same (`Acceptance.watch`), so a class whose prior is too low is still measured."""

    def __init__(self, depth: int) -> None:
        self._depth = depth
        self._counts = [[(PRIOR_WEIGHT * share, PRIOR_WEIGHT)] * depth for share in PRIOR]  # (taken, judged)

    @staticmethod
    def _class(agreement: int) -> int:
        return min(agreement.bit_length(), CLASSES - 1)

    def expected(self, agreement: int, most: int) -> list[float]:
        """For a draft that follows an agreement of `agreement` tokens: the tokens expected taken if it
        is cut to 1, 2, ... `most` tokens."""
        counts = self._counts[self._class(agreement)]
        expected, whole, total = [], 1.0, 0.0
        for taken, judged in counts[: min(most, self._depth)]:
            whole *= taken / judged  # the chance every token up to this one is taken
            total += whole
            expected.append(total)
        return expected

    def judged(self, agreement: int, drafted: int, taken: int) -> None:
        """A draft that followed an agreement of `agreement` tokens had `taken` of its `drafted` taken:
        each depth up to the first refused one is judged (past it, the draft was not reached)."""
        counts = self._counts[self._class(agreement)]
        for depth in range(min(taken + 1, drafted, self._depth)):
            taken_here, judged = counts[depth]
            counts[depth] = (taken_here * DECAY + (depth < taken), judged * DECAY + 1.0)

    def describe(self) -> dict[str, dict[str, float]]:
        """For the operator's view (`/admin/models`), per class of match (its shortest and longest
        lengths): the chance a draft's first token is taken, and the tokens a whole draft is
        expected to have taken."""
        view = {}
        for index, (label, counts) in enumerate(zip(LABELS, self._counts, strict=True)):
            shortest = (1 << index) >> 1  # the class's shortest match: 0, 1, 2, 4, ...
            taken, judged = counts[0]
            whole = self.expected(shortest, self._depth)[-1]
            view[label] = {"first": round(taken / judged, 3), "whole": round(whole, 2)}
        return view
