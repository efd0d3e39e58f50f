"""Fault injection: each kind of call the scheduler makes on a job's behalf raises in turn.

Each time, the request the fault was for gets a 500 (InternalError) and nothing else; its
slot comes back; every other request finishes; the books hold; and the next request works.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from asgi_llm.core import Finish, InternalError
from asgi_llm.core.events import EngineEvent
from asgi_llm.engines.llamacpp import batching
from asgi_llm.engines.llamacpp.batching import Scheduler
from asgi_llm.engines.llamacpp.jobs import END, BatchToken, Job, Turn
from asgi_llm.engines.llamacpp.prompt_cache import PromptCache

from .sequence_model import SYSTEM, Model, Request, Scripted


class Injected(Exception):
    pass


class FaultyModel(Model):
    """Raises once, at the first call of kind `fails` once armed."""

    def __init__(self, sequences: int, fails: str) -> None:
        super().__init__(sequences)
        self.fails, self.armed, self.fired = fails, False, False

    def _maybe(self, kind: str) -> None:
        if self.armed and not self.fired and kind == self.fails:
            self.fired = True
            raise Injected(kind)

    def decode(self, batch: Sequence[BatchToken]) -> None:
        self._maybe("decode")
        super().decode(batch)

    def forget(self, sequence: int, start: int) -> None:
        self._maybe("forget")
        super().forget(sequence, start)

    def copy(self, source: int, target: int) -> None:
        self._maybe("copy")
        super().copy(source, target)

    def save(self, sequence: int, limit: int) -> tuple[Any, int] | None:
        self._maybe("save")
        return super().save(sequence, limit)

    def restore(self, sequence: int, state: Any) -> bool:
        self._maybe("restore")
        return super().restore(sequence, state)


class FaultyChoice(Scripted):
    """A scripted choice whose begin, step or close raises once (the sampler, the grammar,
    the detokenizer and stops all run inside `step`)."""

    def __init__(self, model: FaultyModel, prompt: list[int], tokens: int, mark: int) -> None:
        super().__init__(model, prompt, tokens, mark)
        self.faulty = model

    def begin(self, cached: int) -> Sequence[EngineEvent]:
        self.faulty._maybe("begin")
        return super().begin(cached)

    def step(self, row: int, top: int | None = None) -> Turn:
        self.faulty._maybe("step")
        return super().step(row)

    def close(self) -> None:
        self.faulty._maybe("close")


def _submit(scheduler: Scheduler, model: FaultyModel, prompt: list[int], *, choices: int = 1, tokens: int = 3) -> Request:
    request = Request(choices)
    group = object()
    jobs = [Job(request.ticket, prompt, FaultyChoice(model, prompt, tokens, 50_000 + 1000 * i), group=group) for i in range(choices)]
    scheduler.submit(jobs)
    return request


def _run(scheduler: Scheduler) -> None:
    for _ in range(500):
        if not scheduler.active:
            return
        scheduler.step()
        assert scheduler.violations() == []
    raise AssertionError("the scheduler did not finish")


KINDS = ["decode", "forget", "copy", "save", "restore", "begin", "step", "close"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_fault_at_each_kind_of_call_ends_only_the_request_it_was_for(kind: str, caplog: pytest.LogCaptureFixture) -> None:
    model = FaultyModel(2, kind)
    scheduler = Scheduler(model, slots=2, batch=64, chunk=64, cache=PromptCache(10**6))
    first = _submit(scheduler, model, [*SYSTEM, 1, 2, 3])
    _run(scheduler)
    model.armed = True
    # traffic that makes every kind of call: a shared prompt copied, choices of one prompt,
    # a slot's cache set aside for another prompt, and a conversation restored from the cache
    requests = [
        _submit(scheduler, model, [*SYSTEM, 4, 5], choices=2),
        _submit(scheduler, model, [9] * 30),
        _submit(scheduler, model, [8] * 30),
    ]
    _run(scheduler)
    requests.append(_submit(scheduler, model, [*SYSTEM, 1, 2, 3, 100, 6]))  # the first one's next turn
    _run(scheduler)
    assert model.fired, f"the traffic never made a {kind} call"
    failed = [r for r in requests if any(isinstance(i, InternalError) for i in r.items)]
    if kind == "close":  # a choice closes once its request has all it needs: the fault is only logged
        assert not failed and "a choice failed to close" in caplog.text
    else:
        assert failed, "the fault reached no request"
    for request in failed:
        errors = [i for i in request.items if isinstance(i, InternalError)]
        assert len(errors) == 1 and isinstance(errors[0].__cause__, Injected)
        assert END not in request.items and not any(isinstance(i, Finish) for i in request.items)
    for request in requests:
        if request not in failed:
            assert request.items[-1] is END and sum(isinstance(i, Finish) for i in request.items) == request.choices
    if kind not in ("decode", "close"):  # a failed decode fails every request in its batch; any other fault one request
        assert len(failed) == 1
    assert scheduler.faults == len(failed) if kind != "decode" else scheduler.faults >= 1
    assert not scheduler.broken and scheduler.violations() == []
    assert scheduler.free_slots == 2 and scheduler.running == 0
    for slot in scheduler.slots:
        assert slot.tokens == model.holds(slot.sequence)
    after = _submit(scheduler, model, [*SYSTEM, 7])
    _run(scheduler)
    assert after.items[-1] is END and first.items[-1] is END


def test_a_fault_no_job_owns_leaves_the_scheduler_broken_not_spinning(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fault in planning belongs to no request: the books are in doubt, so the scheduler says
    it is broken (the runtime then restarts the model, ending its requests with a 503)."""
    model = FaultyModel(2, "none")
    scheduler = Scheduler(model, slots=2, batch=64, chunk=64)
    request = _submit(scheduler, model, [1, 2, 3])

    def plan(active: list[Any], batch: int, chunk: int) -> Any:
        raise RuntimeError("planning broke")

    monkeypatch.setattr(batching, "plan", plan)
    assert scheduler.step() is True and scheduler.broken
    gone = RuntimeError("restarting")
    scheduler.abandon(gone)
    assert request.items == [gone] and not scheduler.active and scheduler.free_slots == 2
