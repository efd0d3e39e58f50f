"""The scheduler's layout (batch_plan.py): the breaks a joining slot leaves among the busy ids."""

from __future__ import annotations

import itertools
import random

import pytest

from asgi_llm.engines.llamacpp.batch_plan import Breaks
from asgi_llm.engines.llamacpp.batching import Slot
from asgi_llm.engines.llamacpp.jobs import Job, Ticket

from .test_batching import Counting, Inbox


@pytest.mark.parametrize("seed", range(20))
def test_the_breaks_a_joining_slot_leaves_are_counted_as_by_sorting_all(seed: int) -> None:
    """Each free slot's count is a lookup among the busy ids sorted once, not a sort of them
    all per free slot (which made placing a burst of jobs cubic in the slots)."""
    rng = random.Random(seed)
    slots = [Slot(i) for i in range(rng.randint(1, 24))]
    for slot in slots:
        if rng.random() < 0.5:
            slot.job = Job(Ticket(Inbox(), 1), [1], Counting([1], 1))
    breaks = Breaks(slots)
    for slot in slots:
        if slot.job is None:
            busy = sorted({s.sequence for s in slots if s.job is not None} | {slot.sequence})
            assert breaks.joining(slot.sequence) == sum(b - a > 1 for a, b in itertools.pairwise(busy))
