"""Continuous batching: the choices in flight on one model are decoded together, one batched
decode per step, and new ones join between steps.

Pure orchestration, no `llama_cpp` here: the engine supplies a `Backend` for the model calls
and a `Choice` for each job (jobs.py). Each of the model's `slots` is one sequence of its
context; a slot keeps what it last decoded, so a new prompt that starts the same way (the next
turn of a chat) skips that prefix, or starts from another slot's or a saved prompt's cache
(cache_reading.py). Prompts are fed in chunks beside the running choices' next tokens, so
streams keep moving while a long prompt is read. Jobs wait in FIFO order for a free slot; a
job whose client left is dropped before it costs anything. Busy slots are kept to consecutive
sequence ids, and each batch laid out in their order: that is what llama.cpp decodes in one pass
(batch_plan.py). The choices whose next pick is plain greedy have it picked together, in one
pass over the step's logits (`Backend.top`); the others pick their own.

One fault, one request: whatever raises on behalf of one job (reading its cache, its choice's
step) ends that job's request with an error and empties its slot; a failed decode does that
for the jobs of its batch. After any fault the invariants are checked (`violations`); when
they do not hold the scheduler is `broken`, and the engine restarts the model.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from ...core.errors import InternalError
from ...core.events import EngineEvent
from .batch_plan import Fed, leader, plan, slot_for
from .cache_reading import CacheReader
from .jobs import END, Backend, BatchToken, Gate, Job
from .media_reading import read_media
from .prompt_cache import PromptCache
from .prompt_files import PromptFiles
from .speculation import Drafting, unpick

__all__ = ["END", "Scheduler", "SchedulerView", "Slot"]


@dataclass(frozen=True)
class SchedulerView:
    """The scheduler as the event loop sees it, taken at once: requests `running` (a choice in a
    sequence), sequences `free` of `slots`, jobs ended by `faults`, and when a job last `moved`."""

    running: int
    free: int
    slots: int
    faults: int
    moved: float


log = logging.getLogger("asgi_llm.engine")


@dataclass(eq=False)
class Slot:
    """One sequence of the context."""

    sequence: int
    tokens: list[int] = field(default_factory=list)  # what its cache holds, position by position
    job: Job | None = None
    used: int = 0  # the step its last job left at


class Scheduler:
    """Runs on the inference thread only; `submit` and every step are called there."""

    def __init__(
        self,
        backend: Backend,
        *,
        slots: int,
        batch: int,
        chunk: int,
        cache: PromptCache | None = None,
        files: PromptFiles | None = None,
        drafting: Drafting | None = None,
    ) -> None:
        self._backend = backend
        self.drafting = drafting
        self.cache = cache
        self.gate: Gate | None = None  # set where the model has LoRA adapters
        self.slots = [Slot(i) for i in range(slots)]
        self._reader = CacheReader(backend, self.slots, cache, files)
        self._batch = max(batch, slots)
        self._chunk = max(chunk, 1)
        self._queue: deque[Job] = deque()
        self._active: list[Job] = []
        self._clock = 0
        self.running = 0  # requests with a choice in a slot
        self.faults = 0  # jobs ended by a fault on their behalf
        self.broken = False  # an invariant failed after a fault: the model must restart
        self.moved = time.monotonic()  # when a job last moved
        self.view = SchedulerView(0, slots, slots, 0, self.moved)
        """What the event loop reads of it (metrics, the queue bound, the stall watchdog): one
        snapshot, replaced whole by the inference thread after each step."""

    @property
    def active(self) -> bool:
        return bool(self._queue or self._active)

    @property
    def free_slots(self) -> int:
        """Sequences no choice holds (read from the event loop too: a snapshot)."""
        return sum(slot.job is None for slot in self.slots)

    def submit(self, jobs: Iterable[Job]) -> bool:
        """Queue the jobs; True when some of them must wait for a slot to free up."""
        self._queue.extend(jobs)
        return len(self._queue) > self.free_slots

    def step(self) -> bool:
        """One decode of every running choice's next token and of prompt chunks; False when
        nothing could be done (no free slot for what waits, nothing running). A fault that no
        job owns (in planning, say) leaves the books in doubt: the scheduler is then `broken`."""
        try:
            return self._step()
        except Exception as exc:
            log.error("a scheduler step failed: %r", exc, exc_info=exc)
            self.broken = True
            return True
        finally:
            self._publish()

    def _publish(self) -> None:
        self.view = SchedulerView(self.running, self.free_slots, len(self.slots), self.faults, self.moved)

    def _step(self) -> bool:
        self._clock += 1
        faults = self.faults
        for job in [j for j in self._active if j.ticket.cancelled]:
            self._end(job)
        admitted, read = self._admit(), read_media(self._active, self._backend, self._fail, self._chunk)
        self.moved = read or self.moved  # a piece of a prompt's images read is progress too
        started = time.perf_counter()  # a step's cost includes its drafting (a draft model's decodes)
        if self.drafting is not None:
            self.drafting.propose(self._active, self._batch)
        batch, fed = plan(self._active, self._batch, self._chunk)
        if batch:
            prompts = any(job.token is None for job, _, _ in fed)
            self._decode(batch, fed)
            if self.drafting is not None and not prompts:
                self.drafting.timed(len(batch), time.perf_counter() - started)
        if self.faults != faults and (broken := self.violations()):
            log.error("the scheduler's invariants failed after a fault: %s", "; ".join(broken))
            self.broken = True
        return bool(batch) or admitted or read is not None

    def abandon(self, error: BaseException) -> None:
        """End every job with `error` (the model is going away); slots are left empty."""
        tickets = {id(j.ticket): j.ticket for j in (*self._active, *self._queue)}
        for job in self._active:
            _closed(job)
        for ticket in tickets.values():
            if not ticket.cancelled:
                ticket.send(error)
            ticket.cancelled = True
        self._active.clear()
        self._queue.clear()
        for slot in self.slots:
            slot.job = None
            slot.tokens = []
        self.running = 0
        self._publish()

    def violations(self) -> list[str]:
        """The scheduler's invariants that do not hold (none, always, unless a bug let one go)."""
        broken = []
        active = set(map(id, self._active))
        for slot in self.slots:
            if slot.job is not None and (id(slot.job) not in active or slot.job.slot is not slot):
                broken.append(f"slot {slot.sequence} holds a job that is not running there")
        for job in self._active:
            if job.slot is None or job.slot.job is not job:
                broken.append("a running job has no slot")
        if len(active) != len(self._active) or any(id(job) in active for job in self._queue):
            broken.append("a job is listed twice")
        tickets = {id(j.ticket) for j in (*self._active, *self._queue) if j.ticket.admitted}
        if self.running != len(tickets):
            broken.append(f"running is {self.running}, but {len(tickets)} admitted requests are open")
        if self.cache is not None and not self.cache.consistent():
            broken.append("the prompt cache's size is not the sum of its entries within its budget")
        return broken

    # -- admission ---------------------------------------------------------------

    def _admit(self) -> bool:
        admitted = False
        while self._queue:
            job = self._queue[0]
            if job.ticket.cancelled:
                self._queue.popleft()
                self._close(job)
                continue
            free = [slot for slot in self.slots if slot.job is None]
            if not free or (self.gate is not None and not self.gate.admits(job, bool(self._active), self.slots)):
                break  # FIFO: a job of another adapter setting waits for the running ones to finish
            self._queue.popleft()
            self._place(job, free)
            admitted = True
        return admitted

    def _place(self, job: Job, free: list[Slot]) -> None:
        first = leader(self._active, job)
        slot = slot_for(job, free, self.slots, following=first is not None)
        if first is not None:
            job.leader = first
            first.followers.append(job)
        slot.job = job
        job.slot = slot
        self._active.append(job)
        if not job.ticket.admitted:
            job.ticket.admitted = True
            self.running += 1
        self.moved = time.monotonic()
        if first is None:
            self._read(job)

    def _read(self, job: Job) -> None:
        try:
            self._reader.read(job)
        except Exception as exc:  # noqa: BLE001 (one fault, one request: it ends this job only)
            self._fail(job, exc, "reading its prompt's cache")

    # -- one step ------------------------------------------------------------------

    def _decode(self, batch: list[BatchToken], fed: Fed) -> None:
        try:
            self._backend.decode(batch)
        except Exception as exc:  # noqa: BLE001 (a failed decode ends its batch's requests, only them)
            self._decode_failed(fed, exc)
            return
        finally:
            self._reader.decoded()  # llama.cpp moves pending copies first thing in a decode
        self.moved = time.monotonic()
        ready = []
        for job, tokens, row in fed:
            if job.slot is None:  # ended meanwhile
                continue
            job.slot.tokens.extend(tokens)
            if job.token is not None:
                job.token = None
            else:
                del job.pending[: len(tokens)]
                if not job.pending:
                    self._reader.prompt_read(job)
            if row is not None:
                job.logits = row - len(job.draft)  # a draft's rows follow its next token's
                ready.append(job)
        tops = self._tops(ready)
        for job in ready:
            if job.slot is not None:
                self._share(job, tops)
                self._advance(job, tops)

    def _tops(self, ready: list[Job]) -> dict[int, int]:
        """The top token of each row whose choice (or a follower sampling from it) picks plain
        greedy next, all picked in one pass: batch row -> token. Where that fails, none: each
        choice then picks its own, as any other does."""
        try:
            rows = [
                row
                for job in ready
                if job.choice.greedy or any(f.choice.greedy for f in job.followers)
                for row in range(job.logits, job.logits + len(job.draft) + 1)
            ]
            return dict(zip(rows, self._backend.top(rows), strict=True)) if rows else {}
        except Exception as exc:  # the choices pick one by one instead
            log.error("the step's greedy picks failed: %r", exc, exc_info=exc)
            return {}

    def _share(self, leader: Job, tops: dict[int, int]) -> None:
        """Followers take a copy of the leader's read prompt and sample from its logits."""
        followers, leader.followers = leader.followers, []
        for job in followers:
            job.leader = None
            try:
                self._reader.copy_reading(leader, job)
            except Exception as exc:  # noqa: BLE001 (one fault, one request: it ends this job only)
                self._fail(job, exc, "copying its prompt's reading")
                continue
            self._advance(job, tops)

    def _advance(self, job: Job, tops: dict[int, int]) -> None:
        """The choice picks at its row, and on at each drafted position while it picks what was
        drafted there; the drafted tokens it did not pick leave the cache (speculation.py)."""
        ticket = job.ticket
        if ticket.cancelled:
            self._end(job)
            return
        draft, job.draft = job.draft, []
        taken, token = 0, None
        try:
            if not job.begun:
                job.begun = True
                _send(job, job.choice.begin(job.cached))
            while True:
                turn = job.choice.step(job.logits, tops.get(job.logits))
                _send(job, turn.events)
                token = turn.token
                if token is None or ticket.cancelled:
                    break
                if job.lookup is not None:
                    job.lookup.extend((token,))
                if taken == len(draft) or token != draft[taken]:
                    break
                taken, job.logits = taken + 1, job.logits + 1
        except Exception as exc:  # noqa: BLE001 (one fault, one request: it ends this job only)
            self._fail(job, exc, "generating its output", keep_cache=unpick(self._backend, job, len(draft) - taken))
            return
        if self.drafting is not None:
            self.drafting.settle(job, len(draft), taken, token)
        if not unpick(self._backend, job, len(draft) - taken):
            self._fail(job, RuntimeError("a draft's cells could not be dropped"), "dropping a draft")
            return
        job.token = token
        if token is None or ticket.cancelled:
            self._end(job)

    # -- faults --------------------------------------------------------------------

    def _decode_failed(self, fed: Fed, exc: Exception) -> None:
        self._reader.copies_lost()  # copies meant to move in this decode may or may not have
        for job, _, _ in fed:
            if job.slot is not None:
                self._fail(job, exc, "decoding its batch")

    def _fail(self, job: Job, exc: Exception, doing: str, *, keep_cache: bool = False) -> None:
        """End `job`'s request with an error; the rest go on. Unless the fault left its slot's
        cache as it was (`keep_cache`), the slot is emptied, since what it holds is unknown."""
        self.faults += 1
        log.error("a request failed while %s: %r", doing, exc, exc_info=exc)
        ticket = job.ticket
        if not ticket.cancelled:
            error = InternalError("The model failed while serving this request.")
            error.__cause__ = exc
            ticket.send(error)
        ticket.cancelled = True
        slot = job.slot
        if slot is not None and not keep_cache:
            slot.tokens = []
            try:
                self._backend.forget(slot.sequence, 0)
            except Exception as forgot:  # noqa: BLE001 (what the sequence holds is unknown now)
                log.error("sequence %s could not be cleared: %r", slot.sequence, forgot)
                self.broken = True
        self._end(job)

    # -- leaving -----------------------------------------------------------------

    def _end(self, job: Job) -> None:
        """The job leaves its slot, whose cache stays for the next prompt that starts the same way,
        and its reply joins the model's memory of replies (where it drafts from one)."""
        _closed(job)
        try:
            if job.lookup is not None:
                job.lookup.remember()
        except Exception as exc:  # the memory is optional: the job leaves all the same
            log.error("a reply could not join the memory of replies: %r", exc, exc_info=exc)
        slot = job.slot
        if slot is not None:
            slot.job = None
            slot.used = self._clock
            job.slot = None
        if job in self._active:
            self._active.remove(job)
        self.moved = time.monotonic()
        followers, job.followers = job.followers, []
        if job.leader is not None and job in job.leader.followers:
            job.leader.followers.remove(job)
        job.leader = None
        self._close(job)
        for follower in followers:  # the leader left before reading its prompt: read alone
            follower.leader = None
            self._read(follower)

    def _close(self, job: Job) -> None:
        ticket = job.ticket
        ticket.open -= 1
        if ticket.open > 0:
            return
        if ticket.admitted:
            self.running -= 1
        if not ticket.cancelled:
            ticket.send(END)


def _closed(job: Job) -> None:
    try:
        job.choice.close()
    except Exception as exc:  # noqa: BLE001 (nothing more to tell its client; the rest go on)
        log.error("a choice failed to close: %r", exc)


def _send(job: Job, events: Iterable[EngineEvent]) -> None:
    for event in events:
        if not job.ticket.cancelled and not job.ticket.send(event):
            job.ticket.cancelled = True
