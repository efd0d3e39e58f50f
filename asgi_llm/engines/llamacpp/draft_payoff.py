"""Whether drafting from a sequence's past pays this step, from what steps have cost and what
drafts have won.

A decode's time grows with its tokens: t(n) ≈ fixed + per_token·n (reading the weights is the
fixed part; a GPU's per-token part is small, a CPU's at a few streams is not). A step of R running
sequences plus D drafted tokens, a fraction `a` of them accepted, makes R + a·D tokens in
fixed + per_token·(R + D): more tokens a second than the plain step exactly when
a > per_token·R / (fixed + per_token·R), the share of the plain step that grows with its tokens.
So the busier the batch, the better drafts must do. A straight line misjudges short drafts
where a step's cost is not straight: on a CPU whose weights are multiplied a row at a time, two
tokens cost 1.8 single ones and nine about five, so the line through them asks a one-token draft
to be taken half the time where it must be taken 80%. So once a sequence's draft is known, it is
kept only if its expected tokens, at what a token costs in the plain step, beat what it adds to
the step as the drafts kept before it left it, the cost of each step size as steps of that size
have lately cost (`keeps`). The cost is the model's, measured over its steps; the acceptance each
sequence's own (a repeating reply drafts well beside a story that does not). Both are measured
as the model serves, recent ones weighing most; a sequence that stepped back is judged on what
its lookup would have drafted, at no cost, and one asking in `PROBE` drafts a little whatever
its acceptance, where the draft, taken whole, would pay.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

__all__ = ["Acceptance", "DraftPayoff", "Watched"]

DECAY = 0.97
"""The weight a step's cost keeps per newer one (about the last 30 steps count)."""
RECENT = 0.3
"""The weight of a sequence's latest draft in its acceptance."""
PROBE = 16
"""One asking in this many drafts whatever the figures say, to keep them measured."""
PROBE_TOKENS = 2
"""The most a sequence drafts to measure its acceptance, while a draft must earn its cost."""
WARM = 4.0
"""Weighted steps seen before the cost is trusted."""
SIZE_RECENT = 0.2
"""The weight of a step's time in the recent cost of steps of its size."""
SIZE_SEEN = 2
"""Steps of a size seen before their own cost is used rather than the fitted line's."""


class Watched(NamedTuple):
    """A shadow draft judged: the agreement it followed, its tokens, and how many the picks matched."""

    agreement: int
    drafted: int
    taken: int


class Acceptance:
    """One sequence's drafts from its past: the share of drafted tokens its choice picked, a
    moving average over its recent drafts (`RECENT`). While it drafts nothing, the draft its
    lookup would have made (`shadow`) is judged against its picks as they come, as a draft
    would have been: a sequence that stepped back sees when its text turns to copying again."""

    def __init__(self, rate: float | None = None) -> None:
        self.rate = rate
        self.asked = 0
        self.probing = False  # whether its latest allowance was a probe's (judged as if taken whole)
        self.shadow: list[int] = []
        self._matched = 0  # of `shadow`, the tokens its picks have matched so far
        self._agreement = 0  # how long a match `shadow` follows (lookup.py's `follows`)

    @property
    def measuring(self) -> bool:
        """Whether this asking is a probe's (its allowance's, or every `PROBE`th): its draft is
        made to measure its acceptance again, so it is judged as if taken whole."""
        return self.probing or self.asked % PROBE == 0

    def judged(self, drafted: int, taken: int, prior: float | None = None) -> None:
        """Its choice picked `taken` of `drafted` tokens; its first drafts are weighed against
        `prior`, the model's acceptance, as later ones are against its own."""
        self.rate = _recent(self.rate if self.rate is not None else prior, drafted, taken)

    def watch(self, draft: list[int], agreement: int = 0) -> None:
        """In a step it drafts nothing: `draft` is what its lookup would have drafted (following
        an agreement of `agreement` tokens), judged by its picks from the next on (unless a shadow is
        still being judged)."""
        if not self.shadow:
            self.shadow, self._matched, self._agreement = draft, 0, agreement

    def picked(self, token: int | None) -> Watched | None:
        """The choice's one pick in a step it drafted nothing (None: it drafted, and the shadow
        is dropped unjudged); the shadow, where this pick judged it."""
        if not self.shadow:
            return None
        if token is not None and token == self.shadow[self._matched]:
            self._matched += 1
            if self._matched < len(self.shadow):
                return None
        elif token is None:
            self.shadow, self._matched = [], 0
            return None
        watched = Watched(self._agreement, len(self.shadow), self._matched)
        self.judged(watched.drafted, watched.taken)
        self.shadow, self._matched = [], 0
        return watched


class DraftPayoff:
    """A model's decode cost by batch size (decayed least squares), on the inference thread, and
    the verdict for each sequence's acceptance."""

    def __init__(self) -> None:
        self._weight = self._tokens = self._seconds = self._squares = self._products = 0.0
        self._sizes: dict[int, tuple[int, float]] = {}  # tokens decoded → (steps seen, their recent seconds)
        self.stepped_back = 0  # sequence steps that did not draft from their past, by this verdict
        self.prior: float | None = None  # the model's acceptance: a new sequence's, until its own is judged

    def judged(self, drafted: int, taken: int) -> None:
        """Of `drafted` tokens some sequence drafted from its past, its choice picked `taken`."""
        self.prior = _recent(self.prior, drafted, taken)

    def timed(self, tokens: int, seconds: float) -> None:
        """A step that decoded `tokens` tokens of running sequences and drafts, and no prompt,
        took `seconds` (its decode and its picks)."""
        self._weight = self._weight * DECAY + 1
        self._tokens = self._tokens * DECAY + tokens
        self._seconds = self._seconds * DECAY + seconds
        self._squares = self._squares * DECAY + tokens * tokens
        self._products = self._products * DECAY + tokens * seconds
        seen, recent = self._sizes.get(tokens, (0, seconds))
        self._sizes[tokens] = (seen + 1, recent + SIZE_RECENT * (seconds - recent))

    def cost(self) -> tuple[float, float] | None:
        """(fixed, per_token) seconds of a step; None until enough steps of different sizes."""
        spread = self._weight * self._squares - self._tokens * self._tokens  # weight² × the variance
        if self._weight < WARM or spread < 0.05 * self._weight * self._weight:
            return None
        per_token = (self._weight * self._products - self._tokens * self._seconds) / spread
        return (self._seconds - per_token * self._tokens) / self._weight, per_token

    def step_cost(self, tokens: int) -> float | None:
        """Seconds a step of `tokens` tokens takes: as steps of that size have lately, else as the
        fitted line says (a part past zero costing nothing); None while neither is measured."""
        seen, recent = self._sizes.get(tokens, (0, 0.0))
        if seen >= SIZE_SEEN:
            return recent
        cost = self.cost()
        return None if cost is None else max(cost[0], 0.0) + max(cost[1], 0.0) * tokens

    def keeps(self, record: Acceptance, drafted: int, planned: int, running: int) -> bool:
        """Whether the `drafted` tokens the sequence of `record` drafts from its past stay in a
        step that decodes `planned` tokens without them beside `running` sequences: where the
        tokens it is expected to take are worth more, at what a token costs in the plain step
        (`running` tokens, no drafts), than the time they add to the step as it stands (drafts
        kept before it in this step counted: valued at that step's own rate, which those drafts
        inflate, a second and a third draft beside four streams had each looked worth it while
        together they made steps slower per token than plain ones). A probe's (every `PROBE`th
        asking, so a verdict is measured again) is judged as if all were taken: on a CPU whose
        step is full none can pay, and measuring that again only costs."""
        rate = record.rate if record.rate is not None else self.prior
        if record.measuring:
            rate = 1.0
        plain = self.step_cost(running)
        before, after = self.step_cost(planned), self.step_cost(planned + drafted)
        if not drafted or rate is None or plain is None or before is None or after is None:
            return True
        if rate * drafted * plain >= running * (after - before):
            return True
        self.stepped_back += 1
        return False

    def length(self, record: Acceptance, expected: Sequence[float], planned: int, running: int) -> int:
        """How much of a lookup draft of the sequence of `record` a step that decodes `planned`
        tokens beside `running` sequences keeps, where cut to k tokens it is expected to have
        `expected[k - 1]` taken: the k whose expected tokens, at what a token costs in the plain
        step, beat the time it adds to the step by most (`keeps`' rule, with each length's own
        odds); none where no k does. A probe's is judged whole, as `keeps` judges it. While the
        costs are unmeasured it is kept whole, and the steps that follow measure them."""
        if record.measuring:
            return len(expected) if self.keeps(record, len(expected), planned, running) else 0
        plain, before = self.step_cost(running), self.step_cost(planned)
        if plain is None or before is None:
            return len(expected)
        best, kept = 0.0, 0
        for drafted, tokens in enumerate(expected, 1):
            after = self.step_cost(planned + drafted)
            if after is None:
                return len(expected)
            gain = tokens * plain - running * (after - before)
            if gain > best:
                best, kept = gain, drafted
        if not kept:
            self.stepped_back += 1
        return kept

    def bar(self, running: int) -> float:
        """The acceptance a draft needs, beside `running` sequences' tokens, to make more tokens
        a second: the share of the plain step's cost its tokens make (0 while unmeasured)."""
        cost = self.cost()
        if cost is None:
            return 0.0
        fixed, per_token = cost
        fixed, per_token = max(fixed, 0.0), max(per_token, 0.0)  # a fit past zero: that part costs nothing
        plain = fixed + per_token * running
        return min(1.0, per_token * running / plain) if plain > 0 else 0.0

    def allowance(self, record: Acceptance, bar: float, most: int) -> int:
        """How many tokens the sequence of `record` may draft from its past this step: `most`
        where its acceptance (the model's, until its own drafts are judged) is over `bar`, or
        nothing is asked of it (a bar of 0); `PROBE_TOKENS` while both are unmeasured and at every
        `PROBE`th asking; else none."""
        record.asked += 1
        record.probing = False
        rate = record.rate if record.rate is not None else self.prior
        if bar <= 0.0 or (rate is not None and rate > bar):
            return most
        if rate is None or record.asked % PROBE == 0:
            record.probing = True
            return min(most, PROBE_TOKENS)
        self.stepped_back += 1
        return 0


def _recent(rate: float | None, drafted: int, taken: int) -> float | None:
    """`rate` moved towards a draft's share taken (`RECENT` of the way); unchanged without one."""
    if not drafted:
        return rate
    share = taken / drafted
    return share if rate is None else (1 - RECENT) * rate + RECENT * share
