"""The layout of the scheduler's work (batching.py): which free slot a joining job takes, and
what one step decodes, in which order.

llama.cpp decodes a batch of separate KV streams in one pass only over a run of consecutive
sequence ids in batch order; any other order costs another pass per break. So busy slots are
kept to consecutive ids where a joining job's choice of slot allows, and each batch is laid out
by sequence id. Pure: it reads the jobs and slots and writes neither.
"""

from __future__ import annotations

import bisect
import itertools
from typing import TYPE_CHECKING

from .jobs import BatchToken, Job
from .prompt_cache import common_prefix

if TYPE_CHECKING:
    from .batching import Slot

__all__ = ["Breaks", "Fed", "leader", "plan", "slot_for"]

Fed = list[tuple[Job, list[int], int | None]]  # each job fed, its tokens, and its logits row


def plan(active: list[Job], batch: int, chunk: int) -> tuple[list[BatchToken], Fed]:
    """Every running choice's next token (and its draft, each position with logits), then prompt
    chunks in arrival order while room is left of `batch` tokens (at most `chunk` of them beside
    running choices); laid out by sequence id. A job's row is its last token's."""
    planned: list[tuple[Job, Slot, list[int], int]] = []  # tokens, and how many of the last want logits
    for job in active:
        if job.token is not None and job.slot is not None:
            tokens = [job.token, *job.draft]
            planned.append((job, job.slot, tokens, len(tokens)))
    used = sum(len(p[2]) for p in planned)
    room = batch - used
    if planned:
        room = min(room, chunk)  # a long prompt must not stall the streams
    for job in active:
        if room <= 0:
            break
        if not job.pending or job.leader is not None or job.slot is None:
            continue
        tokens = job.pending[:room]
        planned.append((job, job.slot, tokens, int(len(tokens) == len(job.pending))))
        room -= len(tokens)
    laid: list[BatchToken] = []
    fed: Fed = []
    for job, slot, tokens, outputs in sorted(planned, key=lambda p: p[1].sequence):
        start, first_output = len(slot.tokens), len(tokens) - outputs
        for offset, token in enumerate(tokens):
            laid.append(BatchToken(token, start + offset, slot.sequence, offset >= first_output))
        fed.append((job, tokens, len(laid) - 1 if outputs else None))
    return laid, fed


def slot_for(job: Job, free: list[Slot], slots: list[Slot], following: bool) -> Slot:
    """The free slot `job` takes: a follower (`following`: its cache is replaced by its
    leader's) the one that leaves fewest breaks, and the least recently used among those;
    any other the one whose cache holds the longest prefix of its prompt, then fewest breaks,
    then the most recently used."""
    breaks = Breaks(slots)
    if following:
        return min(free, key=lambda s: (breaks.joining(s.sequence), s.used))
    return max(free, key=lambda s: (common_prefix(s.tokens, job.prompt), -breaks.joining(s.sequence), -s.used))


class Breaks:
    """Gaps between the busy sequence ids: each one costs llama.cpp another pass per decode
    (see `plan`), so among slots whose caches serve a prompt equally well, the one that leaves
    fewest wins. The busy ids are sorted once; each free slot's count is then a lookup."""

    def __init__(self, slots: list[Slot]) -> None:
        self._busy = sorted(s.sequence for s in slots if s.job is not None)
        self._gaps = sum(b - a > 1 for a, b in itertools.pairwise(self._busy))

    def joining(self, sequence: int) -> int:
        """The gaps once the free `sequence` is busy too."""
        busy = self._busy
        at = bisect.bisect_left(busy, sequence)
        before = busy[at - 1] if at else None
        after = busy[at] if at < len(busy) else None
        gaps = self._gaps
        if before is not None and after is not None:
            gaps -= after - before > 1
        if before is not None:
            gaps += sequence - before > 1
        if after is not None:
            gaps += after - sequence > 1
        return gaps


def leader(active: list[Job], job: Job) -> Job | None:
    """A running choice of the same prompt as `job` that has not produced a token yet: `job`
    will copy its reading."""
    if job.group is None:
        return None
    for other in active:
        if other.group is job.group and other.leader is None and other.logits < 0 and other.token is None:
            return other
    return None
