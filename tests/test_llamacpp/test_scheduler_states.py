"""The scheduler and the prompt cache under random traffic (hypothesis stateful), over a backend
that keeps every sequence's cache as the model would, and checks each call against it.

Prompts share a system prompt, extend earlier ones (the next turn) and diverge; requests have
one to three choices, some are cancelled, and slots and cache budgets (from none to tiny to
large) are drawn; with saved prompts on disk, the model restarts now and then. After every step: the scheduler's invariants hold, what each slot says its
cache holds is what the backend holds, no fault happened, and in the end every request ended.
"""

from __future__ import annotations

import shutil
import tempfile

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from asgi_llm.core import Finish
from asgi_llm.engines.llamacpp.batching import Scheduler
from asgi_llm.engines.llamacpp.jobs import END, Job
from asgi_llm.engines.llamacpp.prompt_cache import PromptCache
from asgi_llm.engines.llamacpp.prompt_files import PromptFiles

from .sequence_model import SYSTEM, ByteStates, Model, Request, Scripted

pytestmark = pytest.mark.slow  # 300 runs of 30 steps


class SchedulerMachine(RuleBasedStateMachine):
    @initialize(
        slots=st.integers(1, 4),
        budget=st.sampled_from([None, 0, 30, 60, 100_000]),
        chunk=st.sampled_from([3, 16, 64]),
        on_disk=st.sampled_from([None, 200, 100_000]),
    )
    def start(self, slots: int, budget: int | None, chunk: int, on_disk: int | None) -> None:
        self.slots, self.budget, self.chunk, self.on_disk = slots, budget, chunk, on_disk
        self.directory = tempfile.mkdtemp(prefix="asgi-llm-prompts-")
        self.files: PromptFiles | None = None
        self.boot()
        self.requests: list[Request] = []
        self.prompts: list[list[int]] = [SYSTEM + [1]]
        self.marks = 0

    @rule(
        kind=st.sampled_from(["share", "extend", "diverge", "fresh"]),
        pick=st.integers(0, 1000),
        tail=st.lists(st.integers(0, 50), min_size=1, max_size=30),
        choices=st.integers(1, 3),
        tokens=st.integers(1, 6),
    )
    def submit(self, kind: str, pick: int, tail: list[int], choices: int, tokens: int) -> None:
        base = self.prompts[pick % len(self.prompts)]
        if kind == "share":
            prompt = SYSTEM + tail
        elif kind == "extend":  # the next turn of a conversation
            prompt = base + tail
        elif kind == "diverge":
            prompt = base[: pick % len(base) + 1] + tail
        else:
            prompt = tail
        self.prompts.append(prompt)
        request = Request(choices)
        group = object()
        jobs = []
        for _ in range(choices):
            self.marks += 10_000
            jobs.append(Job(request.ticket, prompt, Scripted(self.model, prompt, tokens, self.marks), group=group))
        self.requests.append(request)
        self.scheduler.submit(jobs)

    def boot(self) -> None:
        """A model, cache and scheduler, with saved prompts (bytes, four a token) in the directory."""
        if self.on_disk is None:
            self.model: Model = Model(self.slots)
        else:
            self.model = ByteStates(self.slots)
            self.files = PromptFiles(self.directory, self.on_disk, bytes(32), pending=self.on_disk, fresh=8)
        self.cache = PromptCache(self.budget) if self.budget is not None else None
        self.scheduler = Scheduler(
            self.model, slots=self.slots, batch=64, chunk=self.chunk, cache=self.cache, files=self.files
        )

    @precondition(lambda self: self.on_disk is not None and not self.scheduler.active)
    @rule()
    def restart(self) -> None:
        """Unload and load again: only the saved prompts on disk remain."""
        assert self.files is not None
        self.files.close()
        self.boot()

    @precondition(lambda self: any(not r.ticket.cancelled and END not in r.items for r in self.requests))
    @rule(pick=st.integers(0, 1000))
    def cancel(self, pick: int) -> None:
        open_ = [r for r in self.requests if not r.ticket.cancelled and END not in r.items]
        open_[pick % len(open_)].ticket.cancelled = True

    @rule(steps=st.integers(1, 8))
    def step(self, steps: int) -> None:
        for _ in range(steps):
            self.scheduler.step()
            self.check()

    def check(self) -> None:
        assert self.scheduler.violations() == []
        assert self.scheduler.faults == 0 and not self.scheduler.broken
        for slot in self.scheduler.slots:
            assert slot.tokens == self.model.holds(slot.sequence), f"slot {slot.sequence} is out of step with its cache"

    @invariant()
    def books_are_straight(self) -> None:
        if hasattr(self, "scheduler"):
            self.check()

    def teardown(self) -> None:
        if not hasattr(self, "scheduler"):
            return
        try:
            self.finish()
        finally:
            if self.files is not None:
                self.files.close()
            shutil.rmtree(self.directory, ignore_errors=True)

    def finish(self) -> None:
        for _ in range(2000):
            if not self.scheduler.active:
                break
            self.scheduler.step()
            self.check()
        assert not self.scheduler.active, "work never finished"
        assert self.scheduler.running == 0 and self.scheduler.free_slots == len(self.scheduler.slots)
        for request in self.requests:
            if request.ticket.cancelled:
                assert END not in request.items
                continue
            assert request.items[-1] is END and request.items.count(END) == 1
            finishes = [i for i in request.items if isinstance(i, Finish)]
            assert len(finishes) == request.choices


SchedulerMachine.TestCase.settings = settings(
    max_examples=300, stateful_step_count=30, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
test_the_scheduler_keeps_its_books_under_random_traffic = SchedulerMachine.TestCase
