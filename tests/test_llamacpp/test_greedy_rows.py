"""The step's one greedy pick: the top of many logits rows in one argmax picks what each plain
greedy pick would, and the scheduler asks for it once a step, for the choices whose next pick is
plain greedy only, handing each its row's top (no model)."""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from asgi_llm.core import Finish, TextDelta, Usage
from asgi_llm.core.events import EngineEvent, GenerationEvent
from asgi_llm.engines.llamacpp.batching import Scheduler
from asgi_llm.engines.llamacpp.jobs import END, Job, Ticket, Turn
from asgi_llm.engines.llamacpp.picks import GreedyPick, top_rows

from .test_batching import Inbox, Recorder

N_VOCAB = 64


def pointer(values: np.ndarray) -> Any:
    return values.ctypes.data_as(ctypes.POINTER(ctypes.c_float))


def one_by_one(values: np.ndarray, rows: list[int]) -> list[int]:
    pick = GreedyPick({}, N_VOCAB)
    return [pick.pick(pointer(np.ascontiguousarray(values[row]))) for row in rows]


def logits_rows(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    values = rng.standard_normal((8, N_VOCAB)).astype(np.float32)
    values[1, [5, 9, 40]] = 7.0  # ties: the first of equal highs
    values[2] = -np.inf  # every token ruled out
    values[3, :] = -np.inf
    values[3, 17] = 0.0  # one left
    values[4, 30] = np.inf  # an infinite logit wins
    values[4, 50] = np.inf
    values[5] = values[5].round(0)  # many ties at once
    return values


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("rows", [[0, 1, 2, 3, 4, 5, 6, 7], [1], [2, 5], [7, 3, 1], [4, 4, 6]])
def test_top_rows_picks_as_each_plain_greedy_pick(seed: int, rows: list[int]) -> None:
    values = logits_rows(seed)
    assert top_rows(values, np.asarray(rows)) == one_by_one(values, rows)


def test_ties_and_infinities() -> None:
    values = logits_rows(0)
    assert top_rows(values, np.asarray([1, 2, 3, 4])) == [5, 0, 17, 30]


class Rows(Recorder):
    """A recording backend whose rows' tops are 1000 + the row; `broken` makes `top` raise."""

    def __init__(self, broken: bool = False) -> None:
        super().__init__()
        self.asked: list[list[int]] = []
        self.broken = broken

    def top(self, rows: Sequence[int]) -> list[int]:
        self.asked.append(list(rows))
        if self.broken:
            raise RuntimeError("no logits")
        return [1000 + row for row in rows]


class Picking:
    """A choice that writes `tokens` tokens, greedy (plain) for its first `plain` steps, and
    records the top it was handed at each step."""

    def __init__(self, tokens: int, plain: int) -> None:
        self.tokens, self.plain = tokens, plain
        self.produced = 0
        self.handed: list[int | None] = []

    @property
    def greedy(self) -> bool:
        return self.produced < self.plain

    def begin(self, cached: int) -> Sequence[EngineEvent]:
        return ()

    def step(self, row: int, top: int | None = None) -> Turn:
        self.handed.append(top)
        self.produced += 1
        events: list[GenerationEvent] = [TextDelta("x")]
        if self.produced < self.tokens:
            return Turn(events, 7)
        events.append(Finish("length", Usage(1, self.tokens, 0)))
        return Turn(events, None)

    def close(self) -> None:
        pass


def submit(scheduler: Scheduler, choice: Picking, prompt: list[int], n: int = 1) -> Inbox:
    inbox = Inbox()
    ticket = Ticket(inbox, n)
    scheduler.submit([Job(ticket, prompt, choice, group=object())])
    return inbox


def run(scheduler: Scheduler) -> None:
    for _ in range(50):
        if not scheduler.active:
            return
        scheduler.step()
    raise AssertionError("the scheduler did not finish")


def test_one_pick_a_step_for_the_greedy_choices_of_a_mixed_batch() -> None:
    backend = Rows()
    scheduler = Scheduler(backend, slots=4, batch=64, chunk=64)
    greedy_a, sampled, greedy_b, grammar_later = Picking(3, 3), Picking(3, 0), Picking(3, 3), Picking(3, 1)
    inboxes = [
        submit(scheduler, choice, prompt)
        for choice, prompt in ((greedy_a, [1, 2]), (sampled, [3]), (greedy_b, [4, 5, 6]), (grammar_later, [8]))
    ]
    run(scheduler)
    # first step: the prompts' last rows (2 tokens, then 1, then 3, then 1): rows 1, 2, 5, 6
    assert backend.asked == [[1, 5, 6], [0, 2], [0, 2]]  # then one token each: rows 0..3
    assert greedy_a.handed == [1001, 1000, 1000]
    assert greedy_b.handed == [1005, 1002, 1002]
    assert sampled.handed == [None, None, None]
    assert grammar_later.handed == [1006, None, None]  # a grammar joined: it picks its own
    assert all(inbox.items[-1] is END for inbox in inboxes)
    assert scheduler.faults == 0


def test_a_failed_pick_leaves_each_choice_to_pick_its_own() -> None:
    backend = Rows(broken=True)
    scheduler = Scheduler(backend, slots=2, batch=64, chunk=64)
    a, b = Picking(2, 2), Picking(2, 2)
    inboxes = [submit(scheduler, a, [1]), submit(scheduler, b, [2])]
    run(scheduler)
    assert a.handed == b.handed == [None, None]
    assert all(inbox.items[-1] is END for inbox in inboxes)
    assert scheduler.faults == 0 and not scheduler.broken


def test_no_pick_is_asked_for_when_no_choice_is_greedy() -> None:
    backend = Rows()
    scheduler = Scheduler(backend, slots=2, batch=64, chunk=64)
    submit(scheduler, Picking(3, 0), [1])
    submit(scheduler, Picking(3, 0), [2])
    run(scheduler)
    assert backend.asked == []
