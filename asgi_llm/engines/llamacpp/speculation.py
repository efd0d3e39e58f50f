"""Speculative decoding: which running sequences draft, how many tokens each, and the tally of
drafted and accepted tokens. Drafts come from two places: what a choice's grammar forces next
(jump-forward: a JSON key's rest, a `const`, the comma after a value's space), for every model;
then, where a model has `speculative = "ngram"`, the tokens that followed the sequence's latest
n-gram in its own past (prompt lookup, lookup.py), after the forced ones; or, first, what the
model wrote in an earlier reply after the same long context (reply_memory.py).

A draft is decoded after the sequence's next token in the step's one batched decode, each
position with its logits; the scheduler then lets the choice pick at each position in turn
(batching.py) and keeps the drafted tokens it picked, up to the first it did not, whose cells it
drops. Each pick is the pick decoding without drafts would make, with the same sampler state and
the same draws, so greedy output is the same token for token and sampled output has the same
distribution; a draft only lets several picks happen in one decode. A forced text spelled in
tokens other than the model's own is just not picked where it differs.

Drafting steps back where it would cost more than it gives: a decode of a few tokens costs about
what one token does (reading the weights dominates), a full one costs per token. So drafts fill
a step only up to `step_tokens` decoded tokens, the running sequences' own counted first; a
sequence whose own measured acceptance is below the share of the step's cost that its tokens
make does not draft from its past; and a lookup draft is cut to the length whose expected tokens,
by the model's odds for the match it follows (draft_odds.py), beat what it adds to the step by
most, or dropped where none does (draft_payoff.py: the busier the batch, the better drafts must
do). A sequence's reach (what it last had accepted, plus one, after a miss; doubling while drafts
are taken whole) bounds the memory's drafts, up to `step_tokens` (a matched reply runs on, and on
a CPU a longer step costs less a token), and a draft model's, up to `draft`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from .draft_odds import DraftOdds
from .draft_payoff import PROBE, Acceptance, DraftPayoff
from .jobs import Backend, Job
from .lookup import PromptLookup
from .reply_memory import ReplyMemory

__all__ = ["DraftRequest", "Drafter", "Drafting", "SpeculationRules", "Spell", "unpick"]

log = logging.getLogger("asgi_llm.engine")

TAILS = 4096
"""The most tokens whose taking as a forced text's last one is tallied."""

Spell = Callable[[int, str], list[int]]
"""The tokens that spell a text after a token, as the vocabulary writes the two together; none
where it would merge the token with the text's start (the model did not write that token then)."""


DraftRequest = tuple[int, Sequence[int], int]
"""A sequence that drafts from a draft model: its number, every token its slot holds with the one
it decodes next (and what is already drafted after it), and the most tokens to guess."""


class Drafter(Protocol):
    """A draft model (draft_model.py): its guesses for every sequence that drafts, at once."""

    def draft(self, requests: Sequence[DraftRequest]) -> list[list[int]]: ...


@dataclass(frozen=True)
class SpeculationRules:
    """A model's drafting settings (ModelConfig's `speculative_*`)."""

    draft: int = 8  # the most tokens a sequence drafts by lookup in one step
    longest: int = 4  # the n-gram sizes a draft follows, longest first
    shortest: int = 2
    step_tokens: int = 16  # drafting stops where a step would decode more tokens than this
    lookup: bool = True  # whether sequences draft beyond what is forced (`ngram`, or `draft` with a drafter)
    memory: int = 0  # the runs of past replies lookup remembers across requests (reply_memory.py); 0: none


class Tail:
    """How often the model took one token where it ended a forced text. The model may write that
    token merged with the free text after it (`"` and `:` as one `":`, an enum's shared `ap` as
    `apple`, a space and a string's quote as ` "`), and a refused guess costs its row; so it is
    drafted only while it is taken at least half the time there (`RECENT` weighing the latest),
    and every `PROBE`th time."""

    RECENT = 0.1

    def __init__(self) -> None:
        self.rate: float | None = None
        self.asked = 0
        self.refused = 0

    def drafts(self) -> bool:
        """Whether to draft it this time."""
        self.asked += 1
        return self.rate is None or self.rate >= 0.5 or self.asked % PROBE == 0

    def judged(self, taken: bool) -> None:
        """The model took it where it was drafted, or wrote another token there."""
        self.refused += not taken
        share = 1.0 if taken else 0.0
        self.rate = share if self.rate is None else self.rate + self.RECENT * (share - self.rate)


class Drafting:
    """The scheduler's drafting, on the inference thread: `propose` before a step is planned,
    `settle` after each sequence's picks at its drafted positions. Without `spell`, nothing
    forced is drafted."""

    def __init__(
        self, rules: SpeculationRules, capacity: int, spell: Spell | None = None, payoff: DraftPayoff | None = None
    ) -> None:
        self.rules = rules
        self._capacity = capacity  # positions per sequence
        self._spell = spell
        self.drafted = 0  # tokens decoded as drafts, since load
        self.accepted = 0  # of those, the ones the choices picked
        self.forced = 0  # of `drafted`, the tokens a grammar forced
        self.forced_accepted = 0  # of those, the ones the choices picked
        self.payoff = payoff or DraftPayoff()
        self.odds = DraftOdds(rules.draft)  # of lookup drafts, model-wide, by the match they follow
        self._drafter: Drafter | None = None
        self.memory = ReplyMemory(rules.memory) if rules.lookup and rules.memory > 0 else None
        self.recall = Acceptance(rate=1.0)  # of drafts from the memory, model-wide: a long context matched
        self.recalled = 0  # of `drafted`, the tokens the memory of replies recalled
        self.recalled_accepted = 0  # of those, the ones the choices picked
        self.tails: dict[int, Tail] = {}  # by token, where one ended a forced text (at most `TAILS`)

    def use(self, drafter: Drafter | None) -> None:
        """Draft with `drafter` (a draft model, loaded anew with its model) instead of lookup."""
        self._drafter = drafter

    def index(self, tokens: list[int], speculative: bool) -> PromptLookup | None:
        """A new sequence's index of its prompt and output, where it drafts beyond what is
        forced and its request lets it (with a drafter the index only marks it as drafting)."""
        if not self.rules.lookup or not speculative:
            return None
        memory = self.memory if self._drafter is None else None
        return PromptLookup(tokens, longest=self.rules.longest, shortest=self.rules.shortest, memory=memory)

    def timed(self, tokens: int, seconds: float) -> None:
        """A step of running sequences and drafts only (no prompt) decoded `tokens` tokens and
        picked from them in `seconds`."""
        self.payoff.timed(tokens, seconds)

    def propose(self, active: list[Job], batch: int) -> None:
        """Set the draft of each running sequence that drafts, within the step's token budget
        (and the `batch` a decode takes): what its grammar forces, then what its lookup finds."""
        running = [job for job in active if job.token is not None and job.slot is not None]
        room = min(self.rules.step_tokens, batch) - len(running)
        bar = self.payoff.bar(len(running)) if room > 0 else 1.0
        planned = len(running)  # tokens the step decodes so far
        asking: list[tuple[Job, int]] = []  # the sequences the drafter guesses for, and how far
        for job in running:
            job.draft, job.forced, job.tail, job.recalled, job.agreement = [], 0, None, False, 0
            if room <= 0 or job.slot is None or job.token is None:
                continue
            space = min(room, self._capacity - len(job.slot.tokens) - 1)  # the next token's cell comes first
            try:
                draft = self._forced(job, job.token, space)
                job.forced = len(draft)
                recalled = self._recalled(job, draft, space - len(draft), planned, len(running))
                if recalled:
                    draft += recalled
                elif job.lookup is not None and len(draft) < space:
                    reach = self._reach(job) if self._drafter is not None else self.rules.draft
                    most = min(self.payoff.allowance(job.acceptance, bar, reach), space - len(draft))
                    if most and self._drafter is not None:  # judged before its guess, which costs decodes
                        if self.payoff.keeps(job.acceptance, most, planned + len(draft), len(running)):
                            asking.append((job, most))
                            room -= most  # held for its guess
                            planned += most
                    elif most:
                        draft += self._looked(job, most, draft, planned, len(running))
                    elif not draft and self._drafter is None:  # what it would have drafted, judged by its picks
                        job.acceptance.watch(*job.lookup.follows(self.rules.draft))
            except Exception as exc:  # a draft is optional: this job decodes without one
                log.error("a sequence's draft failed; it decodes without one: %r", exc, exc_info=exc)
                draft, job.forced, job.tail, job.recalled, job.agreement = [], 0, None, False, 0
            job.draft = draft
            room -= len(draft)
            planned += len(draft)
            self.drafted += len(draft)
            self.forced += job.forced
        if asking:
            self._guess(asking)

    def _reach(self, job: Job) -> int:
        """The most the drafter guesses next for it: its reach, at most `draft` (a reach the
        memory's whole takes grew serves the memory alone; lookup drafts, and the shadow of a
        sequence that stepped back, are `draft` long, cut by their odds)."""
        return min(job.reach or self.rules.draft, self.rules.draft)

    def _looked(self, job: Job, most: int, draft: list[int], planned: int, producing: int) -> list[int]:
        """Its lookup's draft after `draft`, cut where the odds of the match it follows say the
        rest would not pay (draft_odds.py); where none is kept and nothing else is drafted, it is
        watched instead (judged by the picks, at no cost)."""
        assert job.lookup is not None
        looked, agreement = job.lookup.follows(most, after=draft)
        expected = self.odds.expected(agreement, len(looked))
        kept = looked[: self.payoff.length(job.acceptance, expected, planned + len(draft), producing)]
        if kept:
            job.agreement = agreement
        elif not draft:
            job.acceptance.watch(looked, agreement)
        return kept

    def _recalled(self, job: Job, draft: list[int], room: int, planned: int, producing: int) -> list[int]:
        """What the model wrote before after the context `job` is in (reply_memory.py), where it
        pays in this step: judged by the memory's own acceptance, model-wide (a sequence's lookup
        may guess badly where the memory, matching a long context, does not)."""
        if job.lookup is None or room <= 0:
            return []
        guess = job.lookup.recall(min(job.reach or self.rules.draft, room), after=draft)
        if not guess:
            return []
        self.recall.asked += 1
        if not self.payoff.keeps(self.recall, len(guess), planned + len(draft), producing):
            return []
        job.recalled = True
        self.recalled += len(guess)
        return guess

    def _guess(self, asking: list[tuple[Job, int]]) -> None:
        """The drafter's guesses, after each sequence's forced draft (the drafter keeps its own
        failures: a sequence it fails gets no guess)."""
        requests = [
            (job.slot.sequence, [*job.slot.tokens, job.token, *job.draft], most)
            for job, most in asking
            if job.slot is not None and job.token is not None
        ]
        assert self._drafter is not None and len(requests) == len(asking)
        for (job, _), guess in zip(asking, self._drafter.draft(requests), strict=True):
            job.draft += guess
            self.drafted += len(guess)

    def _forced(self, job: Job, token: int, most: int) -> list[int]:
        """The tokens of the text `job`'s grammar forces after `token`, the last one only where
        its `Tail` says it is taken there (`job.tail` then names it)."""
        if self._spell is None or most <= 0:
            return []
        text = job.choice.forced()
        spelled = self._spell(token, text) if text else []
        if spelled and len(spelled) <= most and self._tail(spelled[-1]).drafts():
            job.tail = spelled[-1]
            return spelled
        return spelled[:-1][:most]

    def _tail(self, token: int) -> Tail:
        if token not in self.tails and len(self.tails) >= TAILS:
            self.tails.clear()  # a grammar of endless distinct endings: start the tallies again
        return self.tails.setdefault(token, Tail())

    def describe(self) -> dict[str, object]:
        """For the operator's view of the model (`/admin/models`)."""
        rate = self.accepted / self.drafted if self.drafted else None
        return {
            "mode": ("draft" if self._drafter is not None else "ngram") if self.rules.lookup else "grammar",
            "drafted": self.drafted,
            "accepted": self.accepted,
            "acceptance": rate,
            "forced": self.forced,
            "forced_accepted": self.forced_accepted,
            "stepped_back": self.payoff.stepped_back,
            "remembered": len(self.memory) if self.memory is not None else None,
            "recalled": self.recalled,
            "recalled_accepted": self.recalled_accepted,
            "lookup_odds": self.odds.describe() if self.rules.lookup and self._drafter is None else None,
        }

    def settle(self, job: Job, drafted: int, taken: int, token: int | None) -> None:
        """`job` picked `taken` of the `drafted` tokens it drafted this step (its `forced` ones
        first), `token` first: its acceptance and the odds, from how its lookup draft fared, where
        one was verified (or would have been: `Acceptance.shadow`), and its reach, from how the
        memory's or the drafter's did."""
        watched = job.acceptance.picked(token if not drafted else None)
        if watched is not None:
            self.odds.judged(*watched)
        forced, job.forced = min(job.forced, drafted), 0
        if job.tail is not None and (taken >= forced or taken == forced - 1 and token is not None):
            self._tail(job.tail).judged(taken >= forced)  # its last token was picked, or another one there
        job.tail = None
        self.accepted += taken
        self.forced_accepted += min(taken, forced)
        looked, taken = drafted - forced, taken - forced
        recalled, job.recalled = job.recalled, False
        if not looked or taken < 0:
            return
        if recalled:
            self.recall.judged(looked, taken)
            self.recalled_accepted += taken
        else:
            job.acceptance.judged(looked, taken, self.payoff.prior)
            self.payoff.judged(looked, taken)
            if self._drafter is None:
                self.odds.judged(job.agreement, looked, taken)
                return  # a lookup draft's length is its odds': its miss leaves the memory's reach
        most = self.rules.step_tokens if recalled else self.rules.draft  # recalled whole: the memory runs on
        job.reach = min(most, 2 * (job.reach or most)) if taken == looked else taken + 1


def unpick(backend: Backend, job: Job, count: int) -> bool:
    """Drop the last `count` cells of `job`'s sequence (drafted tokens its choice did not pick);
    False where llama.cpp refused, and what the sequence holds is then unknown."""
    slot = job.slot
    if not count or slot is None:
        return True
    start = len(slot.tokens) - count
    del slot.tokens[start:]
    try:
        backend.forget(slot.sequence, start)
    except Exception as exc:  # noqa: BLE001 (the caller empties the slot)
        log.error("sequence %s could not drop a draft: %r", slot.sequence, exc)
        return False
    return True
