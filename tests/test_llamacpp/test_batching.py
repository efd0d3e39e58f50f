"""The continuous-batching scheduler's bookkeeping, over a recording backend (no model)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from asgi_llm.core import Finish, InternalError, TextDelta, Usage
from asgi_llm.core.events import EngineEvent, GenerationEvent
from asgi_llm.engines.llamacpp.batching import Scheduler
from asgi_llm.engines.llamacpp.cache_reading import COPY_GAIN
from asgi_llm.engines.llamacpp.jobs import END, BatchToken, Job, Ticket, Turn
from asgi_llm.engines.llamacpp.prompt_cache import PromptCache


class Recorder:
    def __init__(self, fail: bool = False) -> None:
        self.batches: list[list[BatchToken]] = []
        self.forgotten: list[tuple[int, int]] = []
        self.copies: list[tuple[int, int]] = []
        self.saves: list[int] = []
        self.restores: list[tuple[int, object]] = []
        self.state_size = 10  # bytes of every saved state
        self.fail = fail

    def decode(self, batch: Sequence[BatchToken]) -> None:
        if self.fail:
            raise RuntimeError("no room")
        self.batches.append(list(batch))

    def forget(self, sequence: int, start: int) -> None:
        self.forgotten.append((sequence, start))

    def copy(self, source: int, target: int) -> None:
        self.copies.append((source, target))

    def save(self, sequence: int, limit: int) -> tuple[object, int] | None:
        if limit < self.state_size:
            return None
        self.saves.append(sequence)
        return f"state {len(self.saves)}", self.state_size

    def restore(self, sequence: int, state: object) -> bool:
        self.restores.append((sequence, state))
        return True


class Inbox:
    def __init__(self) -> None:
        self.items: list[object] = []

    def __call__(self, item: object) -> bool:
        self.items.append(item)
        return True


class Counting:
    """A choice that 'samples' first, first+1, ... and reports the batch row it read each from."""

    greedy = False

    def __init__(self, prompt: list[int], tokens: int, first: int = 100) -> None:
        self.prompt, self.tokens, self.first = prompt, tokens, first
        self.produced = self.cached = 0
        self.closed = False

    def begin(self, cached: int) -> Sequence[EngineEvent]:
        self.cached = cached
        return ()

    def step(self, row: int, top: int | None = None) -> Turn:
        n = self.produced
        self.produced += 1
        events: list[GenerationEvent] = [TextDelta(f"{self.first + n}@{row}")]
        if n + 1 < self.tokens:
            return Turn(events, self.first + n)
        events.append(Finish("length", Usage(len(self.prompt), self.tokens, self.cached)))
        return Turn(events, None)

    def close(self) -> None:
        self.closed = True


def submit(scheduler: Scheduler, prompt: list[int], tokens: int, *, choices: int = 1, first: int = 100) -> tuple[Ticket, Inbox, list[Job]]:
    inbox = Inbox()
    ticket = Ticket(inbox, choices)
    group = object()
    jobs = []
    for _ in range(choices):
        jobs.append(Job(ticket, prompt, Counting(prompt, tokens, first), group=group))
    scheduler.submit(jobs)
    return ticket, inbox, jobs


def run(scheduler: Scheduler, steps: int = 100) -> None:
    for _ in range(steps):
        if not scheduler.active:
            return
        scheduler.step()
    raise AssertionError("the scheduler did not finish")


def test_running_choices_decode_in_one_batch_per_step() -> None:
    backend = Recorder()
    scheduler = Scheduler(backend, slots=2, batch=64, chunk=8)
    _, a, _ = submit(scheduler, [1, 2, 3], 3, first=100)
    _, b, _ = submit(scheduler, [4, 5], 3, first=200)
    run(scheduler)
    first = backend.batches[0]
    assert [(t.token, t.position, t.sequence, t.logits) for t in first] == [
        (1, 0, 0, False), (2, 1, 0, False), (3, 2, 0, True), (4, 0, 1, False), (5, 1, 1, True)
    ]
    second = backend.batches[1]
    assert [(t.token, t.position, t.sequence) for t in second] == [(100, 3, 0), (200, 2, 1)]
    assert a.items[:3] == [TextDelta("100@2"), TextDelta("101@0"), TextDelta("102@0")]
    assert b.items[:3] == [TextDelta("200@4"), TextDelta("201@1"), TextDelta("202@1")]
    assert a.items[-1] is END and b.items[-1] is END
    assert scheduler.running == 0


def test_a_long_prompt_is_fed_in_chunks_beside_running_choices() -> None:
    backend = Recorder()
    scheduler = Scheduler(backend, slots=2, batch=64, chunk=4)
    submit(scheduler, [1], 20)
    scheduler.step()
    submit(scheduler, list(range(10, 20)), 1)
    scheduler.step()
    scheduler.step()
    scheduler.step()
    sizes = [(sum(t.sequence == 0 for t in b), sum(t.sequence == 1 for t in b)) for b in backend.batches[1:4]]
    assert sizes == [(1, 4), (1, 4), (1, 2)]  # one token for the stream, the prompt in chunks of 4
    assert backend.batches[3][-1].logits and not backend.batches[1][-1].logits


def test_jobs_wait_in_arrival_order_for_a_free_slot() -> None:
    backend = Recorder()
    scheduler = Scheduler(backend, slots=1, batch=64, chunk=8)
    _, first, _ = submit(scheduler, [1, 2], 2)
    _, second, _ = submit(scheduler, [3, 4], 2)
    _, third, _ = submit(scheduler, [5, 6], 2)
    scheduler.step()
    assert scheduler.running == 1 and first.items and not second.items and not third.items
    run(scheduler)
    decoded = [b[0].token for b in backend.batches]
    assert decoded == [1, 100, 3, 100, 5, 100]


def test_a_prompt_reuses_the_longest_cached_prefix() -> None:
    backend = Recorder()
    scheduler = Scheduler(backend, slots=2, batch=64, chunk=8)
    submit(scheduler, [1, 2, 3, 4], 2)
    submit(scheduler, [7, 8, 9], 2)
    run(scheduler)
    backend.batches.clear()
    _, inbox, _ = submit(scheduler, [7, 8, 9, 100, 5, 6], 1)  # the second slot holds 7 8 9 100
    run(scheduler)
    assert backend.forgotten == []  # all the slot holds is a prefix of the prompt: nothing to drop
    assert [(t.token, t.position, t.sequence) for t in backend.batches[0]] == [(5, 4, 1), (6, 5, 1)]
    finish = inbox.items[-2]
    assert isinstance(finish, Finish) and finish.usage.cached_tokens == 4


def test_a_fully_cached_prompt_reads_its_last_token_again() -> None:
    backend = Recorder()
    scheduler = Scheduler(backend, slots=1, batch=64, chunk=8)
    submit(scheduler, [1, 2, 3], 1)
    run(scheduler)
    backend.batches.clear()
    submit(scheduler, [1, 2, 3], 1)
    run(scheduler)
    assert [(t.token, t.position, t.logits) for t in backend.batches[0]] == [(3, 2, True)]
    assert backend.forgotten[-1] == (0, 2)


def test_choices_of_one_prompt_copy_its_reading() -> None:
    backend = Recorder()
    scheduler = Scheduler(backend, slots=3, batch=64, chunk=8)
    _, inbox, _ = submit(scheduler, [1, 2, 3], 2, choices=3)
    run(scheduler)
    assert len([t for t in backend.batches[0]]) == 3  # the prompt was read once
    assert sorted(backend.copies) == [(0, 1), (0, 2)]
    assert [item for item in inbox.items if isinstance(item, TextDelta)][:3] == [TextDelta("100@2")] * 3
    assert inbox.items.count(END) == 1 and inbox.items[-1] is END


def test_a_cancelled_ticket_leaves_at_the_next_step_and_frees_its_slot() -> None:
    backend = Recorder()
    scheduler = Scheduler(backend, slots=1, batch=64, chunk=8)
    ticket, inbox, _ = submit(scheduler, [1, 2], 50)
    _, later, _ = submit(scheduler, [3], 1)
    scheduler.step()
    scheduler.step()
    ticket.cancelled = True
    run(scheduler)
    assert END not in inbox.items
    assert later.items[-1] is END
    assert sum(1 for b in backend.batches for t in b if t.sequence == 0 and t.token >= 100) == 1


def test_a_cancelled_job_in_the_queue_is_never_decoded() -> None:
    backend = Recorder()
    scheduler = Scheduler(backend, slots=1, batch=64, chunk=8)
    submit(scheduler, [1], 2)
    ticket, inbox, _ = submit(scheduler, [9, 9, 9], 2)
    scheduler.step()
    ticket.cancelled = True
    run(scheduler)
    assert not inbox.items
    assert all(t.token != 9 for b in backend.batches for t in b)
    assert scheduler.running == 0


def test_an_error_in_a_choice_reaches_its_ticket_only() -> None:
    backend = Recorder()
    scheduler = Scheduler(backend, slots=2, batch=64, chunk=8)

    class Broken(Counting):
        def step(self, row: int, top: int | None = None) -> Turn:
            raise ValueError("bad output")

    inbox = Inbox()
    scheduler.submit([Job(Ticket(inbox, 1), [1, 2], Broken([1, 2], 2))])
    _, fine, _ = submit(scheduler, [3], 2)
    run(scheduler)
    assert len(inbox.items) == 1 and isinstance(inbox.items[0], InternalError)
    assert isinstance(inbox.items[0].__cause__, ValueError)
    assert fine.items[-1] is END
    assert scheduler.violations() == [] and scheduler.faults == 1 and scheduler.free_slots == 2


def test_a_failed_decode_fails_the_jobs_in_it_and_clears_their_cache() -> None:
    backend = Recorder(fail=True)
    scheduler = Scheduler(backend, slots=1, batch=64, chunk=8)
    _, inbox, _ = submit(scheduler, [1, 2], 2)
    scheduler.step()
    assert type(inbox.items[0]).__name__ == "InternalError" and backend.forgotten == [(0, 0)]
    assert not scheduler.active and scheduler.running == 0


def test_abandon_ends_every_ticket_with_the_error() -> None:
    scheduler = Scheduler(Recorder(), slots=1, batch=64, chunk=8)
    _, running, _ = submit(scheduler, [1], 5)
    _, queued, _ = submit(scheduler, [2], 5)
    scheduler.step()
    gone = RuntimeError("stopping")
    scheduler.abandon(gone)
    assert running.items[-1] is gone and queued.items == [gone]
    assert not scheduler.active


def test_free_slots_count_sequences_not_requests() -> None:
    scheduler = Scheduler(Recorder(), slots=4, batch=64, chunk=8)
    submit(scheduler, [1, 2], 5, choices=3)
    assert scheduler.free_slots == 4
    scheduler.step()
    assert (scheduler.running, scheduler.free_slots) == (1, 1)  # one request holding three sequences


def test_each_batch_is_laid_out_by_sequence_id_and_rows_follow_it() -> None:
    """llama.cpp decodes one pass per run of consecutive sequence ids in batch order: a batch
    out of order would cost passes, so it is ordered, and every choice still reads its own row."""
    backend = Recorder()
    scheduler = Scheduler(backend, slots=3, batch=64, chunk=8)
    for slot in scheduler.slots:  # the slots hold caches, the last used most long ago
        slot.tokens, slot.used = [9, 9, 9], 3 - slot.sequence
    _, c, _ = submit(scheduler, [7, 8], 3, first=300)  # sequence 2: least recently used
    scheduler.step()
    _, a, _ = submit(scheduler, [1, 2], 3, first=100)
    _, b, _ = submit(scheduler, [4, 5], 3, first=200)
    run(scheduler)
    for batch in backend.batches:
        assert [t.sequence for t in batch] == sorted(t.sequence for t in batch)
    # a takes sequence 1 (next to c's 2), b sequence 0; the second step reads both prompts beside c's
    # next token, laid out 0, 1, 2 whatever the order they were planned in
    assert [(t.sequence, t.logits) for t in backend.batches[1]] == [(0, False), (0, True), (1, False), (1, True), (2, True)]
    texts = {name: [i.text for i in inbox.items if isinstance(i, TextDelta)] for name, inbox in (("a", a), ("b", b), ("c", c))}
    assert texts["c"][1] == "301@4" and texts["a"][0] == "100@3" and texts["b"][0] == "200@1"


def test_a_new_choice_takes_the_slot_that_keeps_busy_sequences_consecutive() -> None:
    backend = Recorder()
    scheduler = Scheduler(backend, slots=4, batch=64, chunk=8)
    for slot in scheduler.slots:  # equally good caches; LRU alone would pick sequence 3, then 2
        slot.tokens, slot.used = [1, 2], 4 - slot.sequence
    submit(scheduler, [1, 2, 3], 5)
    scheduler.step()
    assert [s.sequence for s in scheduler.slots if s.job is not None] == [3]
    submit(scheduler, [1, 2, 4], 5)
    scheduler.step()
    assert sorted(s.sequence for s in scheduler.slots if s.job is not None) == [2, 3]
    for slot in scheduler.slots[:2]:  # a longer cached prefix still wins over keeping ids together
        slot.tokens = [1, 2, 5, 6] if slot.sequence == 0 else slot.tokens
    submit(scheduler, [1, 2, 5, 6, 7], 5)
    scheduler.step()
    assert sorted(s.sequence for s in scheduler.slots if s.job is not None) == [0, 2, 3]
    run(scheduler)


def test_a_prompt_another_slot_holds_more_of_starts_from_a_copy_of_its_cache() -> None:
    """Sequence 0 is busy with a long prompt; a second request sharing its first COPY_GAIN + 2
    tokens takes free sequence 1, copies sequence 0's cache and reads only the rest."""
    backend = Recorder()
    scheduler = Scheduler(backend, slots=2, batch=64, chunk=64)
    shared = list(range(1, COPY_GAIN + 3))
    submit(scheduler, [*shared, 90, 91], 30)
    scheduler.step()
    scheduler.step()
    _, inbox, _ = submit(scheduler, [*shared, 80], 2)
    scheduler.step()
    assert backend.copies == [(0, 1)]
    assert backend.forgotten == [(1, len(shared))]  # the copy's tail past the shared tokens
    joined = backend.batches[2]
    assert [(t.token, t.position, t.sequence) for t in joined if t.sequence == 1] == [(80, len(shared), 1)]
    run(scheduler)
    finish = next(i for i in inbox.items if isinstance(i, Finish))
    assert finish.usage.cached_tokens == len(shared)


def test_a_cache_copy_must_save_at_least_copy_gain_tokens() -> None:
    backend = Recorder()
    scheduler = Scheduler(backend, slots=2, batch=64, chunk=64)
    shared = list(range(1, COPY_GAIN))  # one token short
    submit(scheduler, [*shared, 90, 91], 30)
    scheduler.step()
    _, inbox, _ = submit(scheduler, [*shared, 80], 2)
    run(scheduler)
    assert backend.copies == []
    assert [t.token for t in backend.batches[1] if t.sequence == 1] == [*shared, 80]  # read whole
    finish = next(i for i in inbox.items if isinstance(i, Finish))
    assert finish.usage.cached_tokens == 0


@pytest.mark.parametrize(("gain", "copied"), [(COPY_GAIN - 1, False), (COPY_GAIN, True)])
def test_a_slot_keeps_its_own_cache_unless_another_holds_copy_gain_tokens_more(gain: int, copied: bool) -> None:
    backend = Recorder()
    scheduler = Scheduler(backend, slots=2, batch=64, chunk=64)
    prompt = list(range(1, 41))
    usable = len(prompt) - 1  # the last token is always read again, for its logits
    scheduler.slots[0].tokens = list(prompt)
    scheduler.slots[1].tokens = prompt[: usable - gain]
    submit(scheduler, [*prompt, 7], 30)  # takes sequence 0, the longer cache, and stays busy
    scheduler.step()
    _, inbox, _ = submit(scheduler, prompt, 1)
    run(scheduler)
    assert backend.copies == ([(0, 1)] if copied else [])
    finish = next(i for i in inbox.items if isinstance(i, Finish))
    assert finish.usage.cached_tokens == (usable if copied else usable - gain)


def test_a_conversation_whose_sequence_was_taken_comes_back_from_the_prompt_cache() -> None:
    """One sequence, two conversations in turn: the first one's cache is saved when the second
    takes the sequence, and its next turn is restored from there, not read again."""
    backend = Recorder()
    cache = PromptCache(budget=100)
    scheduler = Scheduler(backend, slots=1, batch=64, chunk=64, cache=cache)
    first = list(range(1, COPY_GAIN + 5))
    submit(scheduler, first, 3)
    run(scheduler)
    submit(scheduler, [500, 501], 2)  # another conversation takes the sequence
    run(scheduler)
    assert backend.saves == [0] and len(cache) == 1
    held = first + [100, 101]  # the prompt and the tokens fed back (the last one never is)
    assert cache.best(held) == (cache.best(held)[0], len(held))
    backend.batches.clear()
    _, inbox, _ = submit(scheduler, [*held, 7], 1)  # the next turn
    run(scheduler)
    assert backend.restores == [(0, "state 1")]
    assert [t.token for t in backend.batches[0]] == [7]
    finish = next(i for i in inbox.items if isinstance(i, Finish))
    assert finish.usage.cached_tokens == len(held)


def test_without_a_prompt_cache_the_next_turn_is_read_again() -> None:
    backend = Recorder()
    scheduler = Scheduler(backend, slots=1, batch=64, chunk=64)
    first = list(range(1, COPY_GAIN + 5))
    submit(scheduler, first, 3)
    run(scheduler)
    submit(scheduler, [500, 501], 2)
    run(scheduler)
    _, inbox, _ = submit(scheduler, [*first, 100, 101, 7], 1)
    run(scheduler)
    assert backend.saves == [] and backend.restores == []
    finish = next(i for i in inbox.items if isinstance(i, Finish))
    assert finish.usage.cached_tokens == 0


def test_a_cache_losing_fewer_than_copy_gain_tokens_is_not_saved() -> None:
    backend = Recorder()
    scheduler = Scheduler(backend, slots=1, batch=64, chunk=64, cache=PromptCache(budget=100))
    shared = list(range(1, 30))
    submit(scheduler, [*shared, 1, 2], COPY_GAIN - 2)  # leaves shared + 2 + COPY_GAIN - 3 tokens
    run(scheduler)
    submit(scheduler, [*shared, 9], 1)  # keeps `shared`: loses COPY_GAIN - 1
    run(scheduler)
    assert backend.saves == []


def test_no_saved_state_is_written_into_a_sequence_a_pending_copy_reads() -> None:
    """Choices of one prompt copy their leader's sequence after the decode that read it; llama.cpp
    moves that data at the next decode. A restore before then would hand them the wrong cache."""
    backend = Recorder()
    cache = PromptCache(budget=100)
    saved_prompt = list(range(200, 200 + COPY_GAIN + 4))
    cache.put(saved_prompt, "saved", 10)
    scheduler = Scheduler(backend, slots=2, batch=64, chunk=64, cache=cache)
    submit(scheduler, [1, 2, 3], 1, choices=2)  # leader on sequence 0, its follower on 1
    scheduler.step()
    assert backend.copies == [(0, 1)] and scheduler.free_slots == 2  # both done: one token each
    _, inbox, _ = submit(scheduler, [*saved_prompt, 5], 1)  # takes sequence 0, the copy's source
    scheduler.step()
    assert backend.restores == []
    run(scheduler)
    finish = next(i for i in inbox.items if isinstance(i, Finish))
    assert finish.usage.cached_tokens == 0  # read instead


def test_a_state_over_the_cache_budget_is_not_even_copied_out() -> None:
    backend = Recorder()
    backend.state_size = 101
    cache = PromptCache(budget=100)
    scheduler = Scheduler(backend, slots=1, batch=64, chunk=64, cache=cache)
    submit(scheduler, list(range(1, COPY_GAIN + 5)), 3)
    run(scheduler)
    submit(scheduler, [500, 501], 2)
    run(scheduler)
    assert backend.saves == [] and len(cache) == 0


def test_restoring_a_saved_prompt_while_the_slot_is_set_aside_keeps_the_books_straight() -> None:
    """The cache race: a sequence holding another conversation is saved (filling the budget)
    just before a saved prompt is restored into it. Nothing the restore needs is dropped, no
    fault happens, and every invariant holds after each step."""
    backend = Recorder()
    cache = PromptCache(budget=20)  # two states of 10 bytes
    system = list(range(1, COPY_GAIN + 10))
    cache.put([*system, 50, 51], "one", 10)
    cache.put([*system, 60, 61], "two", 10)
    scheduler = Scheduler(backend, slots=1, batch=64, chunk=64, cache=cache)
    scheduler.slots[0].tokens = [900 + i for i in range(COPY_GAIN + 5)]  # another conversation, held nowhere else
    _, inbox, _ = submit(scheduler, [*system, 70], 2)
    for _ in range(10):
        if not scheduler.active:
            break
        scheduler.step()
        assert scheduler.violations() == []
    assert scheduler.faults == 0 and inbox.items[-1] is END
    assert backend.saves == [0] and backend.restores == [(0, "two")]  # the most recently used of the equals
    assert cache.consistent() and len(cache) == 2
    finish = next(i for i in inbox.items if isinstance(i, Finish))
    assert finish.usage.cached_tokens == len(system)
