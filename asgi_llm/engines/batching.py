"""Continuous batching: the choices in flight on one model are decoded together, one batched
decode per step, and new ones join between steps.

Pure orchestration, no `llama_cpp` here: the engine supplies a `Backend` for the model calls
and builds each choice's `Job`. Each of the model's `slots` is one sequence of its context; a
slot keeps what it last decoded, so a new prompt that starts the same way (the next turn of a
chat) skips that prefix. A prompt that another slot holds more of (a shared system prompt, a
burst of one request) starts from a copy of that slot's cache, and with a `PromptCache`, a
slot's cache is saved before another prompt replaces it and restored for the prompt that
continues it. Prompts are fed in chunks beside the running choices' next tokens, so streams
keep moving while a long prompt is read. Jobs wait in FIFO order for a free slot; a job whose
client left is dropped before it costs anything. Busy slots are kept to consecutive sequence
ids, and each batch laid out in their order: that is what llama.cpp decodes in one pass.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from ..core.errors import InternalError
from ..core.events import GenerationEvent
from .prompt_cache import PromptCache, SavedPrompt, common_prefix

__all__ = ["COPY_GAIN", "END", "Backend", "BatchToken", "Job", "Scheduler", "Ticket"]

END = object()  # sent to a ticket when all of its choices have finished
COPY_GAIN = 16
"""Prompt tokens another slot or a saved prompt must hold beyond the new job's own slot to be
copied or restored there, and the fewest a replaced cache must lose to be saved. A copy takes
the whole sequence's cache (llama.cpp copies separate KV streams whole): on 2 cores, SmolLM2-135M,
5 ms at 1024 positions and 15 at 4096, against 3.5 ms a prompt token; a save or a restore
about 0.6 ms per 300 tokens."""


class BatchToken(NamedTuple):
    token: int
    position: int
    sequence: int
    logits: bool


class Backend(Protocol):
    def decode(self, batch: Sequence[BatchToken]) -> None:
        """One batched decode; raises when the model refuses it."""
        ...

    def forget(self, sequence: int, start: int) -> None:
        """Drop `sequence`'s cached tokens from position `start` on."""
        ...

    def copy(self, source: int, target: int) -> None:
        """Make `target` hold everything `source` holds (`target` is emptied first). The data
        may move only at the next decode: `source` must not be written before then."""
        ...

    def save(self, sequence: int, limit: int) -> tuple[Any, int] | None:
        """`sequence`'s cache as a state to `restore` later, and its size in bytes; None if
        that would be over `limit` bytes (and then nothing is copied)."""
        ...

    def restore(self, sequence: int, state: Any) -> bool:
        """Make `sequence` hold the saved `state` at once; False (and `sequence` empty) if it
        does not fit."""
        ...


class Ticket:
    """One request: where its events go (`send` is False once nobody listens), and whether its
    client is still there (set from the event loop, read here every step)."""

    def __init__(self, send: Callable[[object], bool], choices: int) -> None:
        self.send = send
        self.cancelled = False
        self.open = choices
        self.admitted = False


@dataclass(eq=False)
class Job:
    """One choice. After each decode that gave it logits (at batch row `logits`), `events` is
    advanced up to its next `None`, having set `token` to what to decode next; it ends when
    the choice is done. `group` marks choices of one prompt, which share its reading."""

    ticket: Ticket
    prompt: list[int]
    group: object = None
    events: Iterator[GenerationEvent | None] = field(default_factory=lambda: iter(()))
    logits: int = -1
    token: int | None = None
    cached: int = 0  # prompt tokens found in the slot's cache
    slot: _Slot | None = None
    pending: list[int] = field(default_factory=list)  # prompt tokens still to decode
    leader: Job | None = None  # a choice of the same prompt whose reading this one will copy
    followers: list[Job] = field(default_factory=list)


@dataclass(eq=False)
class _Slot:
    sequence: int
    tokens: list[int] = field(default_factory=list)  # what its cache holds, position by position
    job: Job | None = None
    used: int = 0


def _close_events(job: Job) -> None:
    if isinstance(job.events, Generator):
        job.events.close()


class Scheduler:
    """Runs on the inference thread only; `submit` and every step are called there."""

    def __init__(
        self, backend: Backend, *, slots: int, batch: int, chunk: int, cache: PromptCache | None = None
    ) -> None:
        self._backend = backend
        self._cache = cache
        self._copy_sources: set[int] = set()  # sequences copied from since the last decode
        self._slots = [_Slot(i) for i in range(slots)]
        self._batch = max(batch, slots)
        self._chunk = max(chunk, 1)
        self._queue: deque[Job] = deque()
        self._active: list[Job] = []
        self._clock = 0
        self.running = 0  # requests with a choice in a slot (read from the event loop: a snapshot)

    @property
    def active(self) -> bool:
        return bool(self._queue or self._active)

    @property
    def free_slots(self) -> int:
        """Sequences no choice holds (read from the event loop too: a snapshot)."""
        return sum(slot.job is None for slot in self._slots)

    def submit(self, jobs: Iterable[Job]) -> bool:
        """Queue the jobs; True when some of them must wait for a slot to free up."""
        self._queue.extend(jobs)
        return len(self._queue) > self.free_slots

    def step(self) -> None:
        self._clock += 1
        for job in [j for j in self._active if j.ticket.cancelled]:
            self._end(job)
        self._admit()
        batch, fed = self._plan()
        if not batch:
            return
        try:
            self._backend.decode(batch)
        except Exception as exc:
            self._decode_failed(fed, exc)
            return
        finally:
            self._copy_sources.clear()  # llama.cpp moves pending copies first thing in a decode
        ready = []
        for job, tokens, row in fed:
            assert job.slot is not None
            job.slot.tokens.extend(tokens)
            if job.token is not None:
                job.token = None
            else:
                del job.pending[: len(tokens)]
            if row is not None:
                job.logits = row
                ready.append(job)
        for job in ready:
            self._share(job)
            self._advance(job)

    def abandon(self, error: BaseException) -> None:
        tickets = {id(j.ticket): j.ticket for j in (*self._active, *self._queue)}
        for job in list(self._active):
            _close_events(job)
        for ticket in tickets.values():
            if not ticket.cancelled:
                ticket.send(error)
            ticket.cancelled = True
        self._active.clear()
        self._queue.clear()
        for slot in self._slots:
            slot.job = None
        self.running = 0

    # -- admission ---------------------------------------------------------------

    def _admit(self) -> None:
        while self._queue:
            job = self._queue[0]
            if job.ticket.cancelled:
                self._queue.popleft()
                self._close(job)
                continue
            free = [slot for slot in self._slots if slot.job is None]
            if not free:
                return
            self._queue.popleft()
            leader = self._reading(job)
            if leader is not None:
                slot = min(free, key=lambda s: (self._breaks(s), s.used))  # its cache is replaced by the leader's
                job.leader = leader
                leader.followers.append(job)
            else:
                slot = max(free, key=lambda s: (common_prefix(s.tokens, job.prompt), -self._breaks(s), -s.used))
            slot.job = job
            job.slot = slot
            if leader is None:
                self._read_from_cache(job)
            self._active.append(job)
            if not job.ticket.admitted:
                job.ticket.admitted = True
                self.running += 1

    def _breaks(self, joining: _Slot) -> int:
        """Gaps between the busy sequence ids once `joining` is busy too: each one costs
        llama.cpp another pass per decode (see `_plan`), so among slots whose caches serve a
        prompt equally well, the one that leaves fewest wins."""
        busy = sorted({s.sequence for s in self._slots if s.job is not None} | {joining.sequence})
        return sum(b - a > 1 for a, b in zip(busy, busy[1:]))

    def _reading(self, job: Job) -> Job | None:
        """A running choice of the same prompt that has not produced a token yet."""
        if job.group is None:
            return None
        for other in self._active:
            if other.group is job.group and other.leader is None and other.logits < 0 and other.token is None:
                return other
        return None

    def _read_from_cache(self, job: Job) -> None:
        """Keep the slot's longest cached prefix of the prompt (all but its last token, whose
        logits are needed), or take another slot's or a saved one where that is `COPY_GAIN`
        tokens longer; the rest is to be decoded. What the slot held beyond is saved first."""
        slot = job.slot
        assert slot is not None
        usable = len(job.prompt) - 1
        cached = min(common_prefix(slot.tokens, job.prompt), usable)
        donor, saved, better = self._source(job, slot)
        if min(better, usable) - cached >= COPY_GAIN:
            self._set_aside(slot, kept=0)
            if donor is not None:
                self._backend.copy(donor.sequence, slot.sequence)
                self._copy_sources.add(donor.sequence)
                slot.tokens = list(donor.tokens)
            elif saved is not None and self._cache is not None:
                self._cache.used(saved)
                restored = self._backend.restore(slot.sequence, saved.state)
                slot.tokens = list(saved.tokens) if restored else []
            cached = min(common_prefix(slot.tokens, job.prompt), usable)
        else:
            self._set_aside(slot, kept=cached)
        if cached < len(slot.tokens):
            self._backend.forget(slot.sequence, cached)
            del slot.tokens[cached:]
        job.cached = cached
        job.pending = job.prompt[cached:]

    def _source(self, job: Job, slot: _Slot) -> tuple[_Slot | None, SavedPrompt | None, int]:
        """The other slot or the saved prompt that holds the longest prefix of the job's prompt,
        and that length. A saved state is written into the slot at once, so not into a slot
        whose cache a pending copy is still to read."""
        donor = max(
            (s for s in self._slots if s is not slot), key=lambda s: common_prefix(s.tokens, job.prompt), default=None
        )
        held = common_prefix(donor.tokens, job.prompt) if donor is not None else 0
        if self._cache is None or slot.sequence in self._copy_sources:
            return donor, None, held
        saved, length = self._cache.best(job.prompt)
        if saved is not None and length > held:
            return None, saved, length
        return donor, None, held

    def _set_aside(self, slot: _Slot, *, kept: int) -> None:
        """Save the slot's cache before all but `kept` tokens of it are dropped, when that
        loses `COPY_GAIN` tokens or more that no other slot or saved prompt holds."""
        cache = self._cache
        if cache is None or len(slot.tokens) - kept < COPY_GAIN or cache.holds(slot.tokens):
            return
        if any(s is not slot and common_prefix(s.tokens, slot.tokens) == len(slot.tokens) for s in self._slots):
            return
        saved = self._backend.save(slot.sequence, cache.budget)
        if saved is not None:
            cache.put(slot.tokens, *saved)

    # -- one step ------------------------------------------------------------------

    def _plan(self) -> tuple[list[BatchToken], list[tuple[Job, list[int], int | None]]]:
        """Every running choice's next token, then prompt chunks in arrival order while room is
        left; laid out by sequence id, since llama.cpp decodes a batch of separate KV streams
        in one pass only over a run of consecutive sequence ids in batch order (any other
        order costs another pass per break)."""
        planned: list[tuple[Job, list[int], bool]] = []  # tokens, and whether the last wants logits
        for job in self._active:
            if job.token is not None and job.slot is not None:
                planned.append((job, [job.token], True))
        room = self._batch - len(planned)
        if planned:
            room = min(room, self._chunk)  # a long prompt must not stall the streams
        for job in self._active:
            if room <= 0:
                break
            if not job.pending or job.leader is not None or job.slot is None:
                continue
            chunk = job.pending[:room]
            planned.append((job, chunk, len(chunk) == len(job.pending)))
            room -= len(chunk)
        batch: list[BatchToken] = []
        fed: list[tuple[Job, list[int], int | None]] = []
        for job, tokens, last in sorted(planned, key=lambda p: p[0].slot.sequence if p[0].slot else 0):
            assert job.slot is not None
            start = len(job.slot.tokens)
            for offset, token in enumerate(tokens):
                batch.append(BatchToken(token, start + offset, job.slot.sequence, last and offset == len(tokens) - 1))
            fed.append((job, tokens, len(batch) - 1 if last else None))
        return batch, fed

    def _share(self, leader: Job) -> None:
        """Followers take a copy of the leader's read prompt and sample from its logits."""
        assert leader.slot is not None
        for job in leader.followers:
            assert job.slot is not None
            self._set_aside(job.slot, kept=0)
            self._backend.copy(leader.slot.sequence, job.slot.sequence)
            self._copy_sources.add(leader.slot.sequence)
            job.slot.tokens = list(leader.slot.tokens)
            job.cached = leader.cached
            job.logits = leader.logits
            job.leader = None
        followers, leader.followers = leader.followers, []
        for job in followers:
            self._advance(job)

    def _advance(self, job: Job) -> None:
        ticket = job.ticket
        if ticket.cancelled:
            self._end(job)
            return
        try:
            for item in job.events:
                if item is None:
                    assert job.token is not None, "a choice paused without a token to decode"
                    return
                if not ticket.send(item):
                    ticket.cancelled = True
        except Exception as exc:
            if not ticket.cancelled:
                ticket.send(exc)
            ticket.cancelled = True
        self._end(job)

    def _decode_failed(self, fed: list[tuple[Job, list[int], int | None]], exc: Exception) -> None:
        error = InternalError("The model failed to decode this request.")
        error.__cause__ = exc
        for job, _, _ in fed:
            assert job.slot is not None
            self._backend.forget(job.slot.sequence, 0)
            job.slot.tokens.clear()
            if not job.ticket.cancelled:
                job.ticket.send(error)
            job.ticket.cancelled = True
            self._end(job)

    # -- leaving -----------------------------------------------------------------

    def _end(self, job: Job) -> None:
        """The job leaves its slot, whose cache stays for the next prompt that starts the same way."""
        _close_events(job)
        slot = job.slot
        if slot is not None:
            slot.job = None
            slot.used = self._clock
            job.slot = None
        if job in self._active:
            self._active.remove(job)
        for follower in job.followers:  # the leader left before reading its prompt: read alone
            follower.leader = None
            self._read_from_cache(follower)
        job.followers = []
        if job.leader is not None and job in job.leader.followers:
            job.leader.followers.remove(job)
        self._close(job)

    def _close(self, job: Job) -> None:
        ticket = job.ticket
        ticket.open -= 1
        if ticket.open > 0:
            return
        if ticket.admitted:
            self.running -= 1
        if not ticket.cancelled:
            ticket.send(END)
