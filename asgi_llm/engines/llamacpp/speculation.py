"""Speculative decoding by prompt lookup: which running sequences draft, how many tokens each,
and the tally of drafted and accepted tokens.

A draft (lookup.py) is decoded after the sequence's next token in the step's one batched decode,
each position with its logits; the scheduler then lets the choice pick at each position in turn
(batching.py) and keeps the drafted tokens it picked, up to the first it did not, whose cells it
drops. Each pick is the pick decoding without drafts would make, with the same sampler state and
the same draws, so greedy output is the same token for token and sampled output has the same
distribution; a draft only lets several picks happen in one decode.

Drafting steps back where it would cost more than it gives: a decode of a few tokens costs about
what one token does (reading the weights dominates), a full one costs per token. So drafts fill
a step only up to `step_tokens` decoded tokens, the running sequences' own counted first, and a
sequence's reach halves to what it last had accepted, plus one, when a draft misses, doubling
again while drafts are taken whole.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from .jobs import Backend, Job

__all__ = ["Drafting", "SpeculationRules", "unpick"]

log = logging.getLogger("asgi_llm.engine")


@dataclass(frozen=True)
class SpeculationRules:
    """A model's drafting settings (ModelConfig's `speculative_*`)."""

    draft: int = 8  # the most tokens a sequence drafts in one step
    longest: int = 4  # the n-gram sizes a draft follows, longest first
    shortest: int = 2
    step_tokens: int = 16  # drafting stops where a step would decode more tokens than this


class Drafting:
    """The scheduler's drafting, on the inference thread: `propose` before a step is planned,
    `settle` after each sequence's picks at its drafted positions."""

    def __init__(self, rules: SpeculationRules, capacity: int) -> None:
        self.rules = rules
        self._capacity = capacity  # positions per sequence
        self.drafted = 0  # tokens decoded as drafts, since load
        self.accepted = 0  # of those, the ones the choices picked

    def propose(self, active: list[Job], batch: int) -> None:
        """Set the draft of each running sequence that drafts, within the step's token budget
        (and the `batch` a decode takes)."""
        running = [job for job in active if job.token is not None and job.slot is not None]
        room = min(self.rules.step_tokens, batch) - len(running)
        for job in running:
            job.draft = []
            if room <= 0 or job.lookup is None or job.slot is None:
                continue
            space = self._capacity - len(job.slot.tokens) - 1  # the next token's cell comes first
            draft = job.lookup.draft(min(job.reach or self.rules.draft, room, space))
            job.draft = draft
            room -= len(draft)
            self.drafted += len(draft)

    def describe(self) -> dict[str, object]:
        """For the operator's view of the model (`/admin/models`)."""
        rate = self.accepted / self.drafted if self.drafted else None
        return {"mode": "ngram", "drafted": self.drafted, "accepted": self.accepted, "acceptance": rate}

    def settle(self, job: Job, drafted: int, taken: int) -> None:
        """`job` picked `taken` of the `drafted` tokens it drafted this step: its next reach."""
        self.accepted += taken
        if not drafted:
            return
        most = self.rules.draft
        job.reach = min(most, 2 * (job.reach or most)) if taken == drafted else taken + 1


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
