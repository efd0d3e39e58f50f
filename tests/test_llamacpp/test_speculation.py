"""Speculative decoding in the scheduler: drafts are decoded beside the next token, the choice
picks at each drafted position in turn, and the cells it did not pick leave the cache.

The choices here pick by a rule of the sequence's cache up to their row, as a model does: so
the output is the same with drafts as without, whatever is drafted, and a draft is right only
where the rule repeats what the sequence holds."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from asgi_llm.core import Finish, InternalError, TextDelta, Usage
from asgi_llm.core.events import EngineEvent, GenerationEvent
from asgi_llm.engines.llamacpp.batching import Scheduler
from asgi_llm.engines.llamacpp.jobs import END, Job, Turn
from asgi_llm.engines.llamacpp.lookup import PromptLookup
from asgi_llm.engines.llamacpp.reply_memory import ReplyMemory
from asgi_llm.engines.llamacpp.speculation import Drafting, SpeculationRules

from .sequence_model import Model, Request, Untimed

Rule = Callable[[list[int]], int]


class Oracle:
    """Picks `rule(what its sequence holds up to the row)`: `tokens` of them, or up to `stop`."""

    greedy = False

    def __init__(self, model: Model, rule: Rule, tokens: int, stop: int | None = None) -> None:
        self.model, self.rule, self.tokens, self.stop = model, rule, tokens, stop
        self.out: list[int] = []

    def begin(self, cached: int) -> Sequence[EngineEvent]:
        return ()

    def forced(self) -> str:
        return ""

    def step(self, row: int, top: int | None = None) -> Turn:
        entry = self.model.last[row]
        assert entry.logits, "a row without logits"
        held = self.model.cells[entry.sequence][: entry.position + 1]
        token = self.rule(held)
        self.out.append(token)
        events: list[GenerationEvent] = [TextDelta(str(token))]
        if len(self.out) >= self.tokens or token == self.stop:
            return Turn([*events, Finish("stop", Usage(0, len(self.out), 0))], None)
        return Turn(events, token)

    def close(self) -> None:
        pass


def steps(scheduler: Scheduler, most: int = 2000) -> Iterator[None]:
    """Steps `scheduler` until its work is done, each step yielded; fails (never hangs) where a
    step does nothing or the work does not end within `most` steps."""
    for _ in range(most):
        if not scheduler.active:
            return
        assert scheduler.step() and not scheduler.broken
        yield
    raise AssertionError(f"the scheduler's work did not end within {most} steps")


def drain(scheduler: Scheduler) -> None:
    for _ in steps(scheduler):
        pass


def cyclic(period: int) -> Rule:
    """Repeats the sequence's first `period` tokens: drafts from the prompt are right."""
    return lambda held: held[len(held) % period]


def hashed(held: list[int]) -> int:
    """A token from the last three: repeats only where they do."""
    return hash(tuple(held[-3:])) % 7


def scheduled(
    prompts: list[list[int]], rule: Rule, tokens: int, drafting: Drafting | None
) -> tuple[Model, Scheduler, list[Oracle], list[Job]]:
    """A scheduler with a job of `rule` for every prompt submitted (drafting where `drafting` is
    given): its model, the scheduler, the choices and the jobs."""
    model = Model(len(prompts))
    scheduler = Scheduler(model, slots=len(prompts), batch=64, chunk=16, drafting=drafting)
    choices = [Oracle(model, rule, tokens) for _ in prompts]
    jobs = [
        Job(Request(1).ticket, list(prompt), choice, lookup=PromptLookup(prompt) if drafting else None)
        for prompt, choice in zip(prompts, choices, strict=True)
    ]
    scheduler.submit(jobs)
    return model, scheduler, choices, jobs


def run(
    prompts: list[list[int]], rule: Rule, tokens: int, rules: SpeculationRules | None
) -> tuple[list[list[int]], int, Drafting | None]:
    """Every prompt's output, the decodes it took, and the drafting's tally."""
    drafting = Drafting(rules, capacity=256, payoff=Untimed()) if rules is not None else None
    model, scheduler, choices, jobs = scheduled(prompts, rule, tokens, drafting)
    decodes = 0
    for _ in steps(scheduler):
        decodes += 1
        for slot in scheduler.slots:  # the books: what the cache holds is what the slot says
            assert model.holds(slot.sequence) == slot.tokens
        assert all(not job.draft for job in jobs), "a draft outlived its step"
        assert not scheduler.violations()
    return [c.out for c in choices], decodes, drafting


def test_a_reply_that_repeats_its_prompt_takes_several_tokens_a_decode() -> None:
    prompt = [5, 6, 7, 8, 9, 10, 11, 12]
    plain, plain_decodes, _ = run([prompt], cyclic(len(prompt)), 40, None)
    drafted, decodes, drafting = run([prompt], cyclic(len(prompt)), 40, SpeculationRules(draft=8))
    assert drafted == plain
    assert drafting is not None and drafting.accepted > 30 and drafting.accepted <= drafting.drafted
    assert decodes * 3 < plain_decodes  # one decode for the prompt, then up to 9 tokens each


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    prompts=st.lists(st.lists(st.integers(0, 6), min_size=1, max_size=20), min_size=1, max_size=4),
    tokens=st.integers(1, 30),
    draft=st.integers(1, 8),
    step_tokens=st.integers(1, 24),
)
def test_output_is_the_same_with_drafts_and_the_cache_holds_only_what_was_picked(
    prompts: list[list[int]], tokens: int, draft: int, step_tokens: int
) -> None:
    plain, _, _ = run(prompts, hashed, tokens, None)
    rules = SpeculationRules(draft=draft, longest=3, shortest=1, step_tokens=step_tokens)
    drafted, _, drafting = run(prompts, hashed, tokens, rules)
    assert drafted == plain
    assert drafting is not None and drafting.accepted <= drafting.drafted


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    prompts=st.lists(st.lists(st.integers(0, 6), min_size=1, max_size=24), min_size=1, max_size=4),
    tokens=st.integers(1, 30),
    memory=st.integers(1, 64),
)
def test_output_is_the_same_when_the_memory_of_replies_drafts(
    prompts: list[list[int]], tokens: int, memory: int
) -> None:
    """The same prompts twice through one model's drafting: the second time much is recalled
    (a small memory forgets), and every output is the model's own."""
    plain = run(prompts, hashed, tokens, None)[0]
    drafting = Drafting(SpeculationRules(draft=8, memory=memory), capacity=256, payoff=Untimed())
    for _ in range(2):
        model = Model(len(prompts))
        scheduler = Scheduler(model, slots=len(prompts), batch=64, chunk=16, drafting=drafting)
        choices = [Oracle(model, hashed, tokens) for _ in prompts]
        scheduler.submit(
            [
                Job(Request(1).ticket, list(prompt), choice, lookup=drafting.index(prompt, True))
                for prompt, choice in zip(prompts, choices, strict=True)
            ]
        )
        for _ in steps(scheduler):
            for slot in scheduler.slots:
                assert model.holds(slot.sequence) == slot.tokens
        assert [choice.out for choice in choices] == plain
    assert drafting.recalled_accepted <= drafting.recalled and drafting.accepted <= drafting.drafted
    assert drafting.memory is not None and len(drafting.memory) <= max(2, memory)


def test_drafting_steps_back_when_the_running_sequences_fill_the_step() -> None:
    prompts = [[1, 2, 3, 1, 2, 3, 1, 2]] * 4
    _, _, drafting = run(prompts, cyclic(3), 20, SpeculationRules(step_tokens=4))
    assert drafting is not None and drafting.drafted == 0  # four running sequences fill four tokens
    _, _, roomy = run(prompts, cyclic(3), 20, SpeculationRules(step_tokens=12))
    assert roomy is not None and roomy.drafted > 0


def test_a_miss_shrinks_the_reach_and_whole_drafts_grow_it() -> None:
    """The reach bounds the memory's drafts (and a draft model's); a lookup draft's miss, whose
    length its odds set, leaves it."""
    drafting = Drafting(SpeculationRules(draft=8, step_tokens=16), capacity=100, payoff=Untimed())
    job = Job(Request(1).ticket, [1], Oracle(Model(1), hashed, 1))

    def recalled(drafted: int, taken: int) -> int:
        job.recalled = True
        drafting.settle(job, drafted, taken, None)
        return job.reach

    assert [recalled(8, 2), recalled(3, 3), recalled(6, 6), recalled(12, 12)] == [3, 6, 12, 16]
    drafting.settle(job, 8, 0, None)  # a lookup draft refused whole
    assert job.reach == 16 and drafting.accepted == 23
    assert recalled(16, 0) == 1


@pytest.mark.parametrize("stop_at", [1, 3])
def test_a_choice_that_ends_inside_a_draft_leaves_none_of_the_rest_cached(stop_at: int) -> None:
    prompt = [4, 5, 6, 7, 4, 5, 6, 7]
    model = Model(1)
    scheduler = Scheduler(
        model, slots=1, batch=64, chunk=16, drafting=Drafting(SpeculationRules(), capacity=64, payoff=Untimed())
    )
    stop = prompt[(len(prompt) + stop_at) % 4]
    choice = Oracle(model, cyclic(4), 50, stop=stop)
    request = Request(1)
    scheduler.submit([Job(request.ticket, prompt, choice, lookup=PromptLookup(prompt))])
    drain(scheduler)
    assert choice.out == [prompt[(len(prompt) + i) % 4] for i in range(len(choice.out))]
    assert choice.out[-1] == stop
    slot = scheduler.slots[0]
    assert model.holds(0) == slot.tokens == prompt + choice.out[:-1]  # the last pick is never decoded


class Unforceable(Oracle):
    """Its grammar's forced text cannot be read (a fault in the grammar's watch, say)."""

    def forced(self) -> str:
        raise RuntimeError("the grammar's position is lost")


def test_a_draft_that_fails_to_be_made_costs_its_sequence_the_draft_only() -> None:
    """Drafting is optional: a fault while drafting leaves that sequence to decode without one,
    the scheduler whole and the output the same."""
    prompt = [5, 6, 7, 8, 5, 6, 7, 8]
    plain, _, _ = run([prompt], cyclic(4), 20, None)
    model = Model(2)
    drafting = Drafting(SpeculationRules(), capacity=256, payoff=Untimed(), spell=lambda token, text: [1, 2, 3])
    scheduler = Scheduler(model, slots=2, batch=64, chunk=16, drafting=drafting)
    broken, fine = Unforceable(model, cyclic(4), 20), Oracle(model, cyclic(4), 20)
    requests = [Request(1), Request(1)]
    scheduler.submit(
        [
            Job(r.ticket, list(prompt), c, lookup=PromptLookup(prompt))
            for r, c in zip(requests, (broken, fine), strict=True)
        ]
    )
    drain(scheduler)
    assert not scheduler.broken and not scheduler.violations() and scheduler.faults == 0
    assert broken.out == fine.out == plain[0]
    assert all(r.items[-1] is END for r in requests)
    assert drafting.accepted > 0  # the sequence that could draft still did


class ForgetFails(Model):
    """Refuses the first drop of cells from a sequence once drafts are under way."""

    def __init__(self, sequences: int) -> None:
        super().__init__(sequences)
        self.failed = False

    def forget(self, sequence: int, start: int) -> None:
        if not self.failed and start > 0:
            self.failed = True
            raise RuntimeError("llama_memory_seq_rm refused")
        super().forget(sequence, start)


def test_a_draft_whose_cells_cannot_be_dropped_ends_its_request_only() -> None:
    """The drafted tokens a choice did not pick must leave the cache: where llama.cpp refuses,
    that request ends with a 500, its sequence is emptied, and the others finish."""
    prompts = [[1, 2, 3, 1, 2, 3, 1, 2, 4, 1, 2, 3], [3, 2, 1, 3, 2, 1, 3, 2, 4, 3, 2, 1]]
    model = ForgetFails(len(prompts))
    scheduler = Scheduler(
        model, slots=2, batch=64, chunk=16, drafting=Drafting(SpeculationRules(), capacity=256, payoff=Untimed())
    )
    choices = [Oracle(model, hashed, 40) for _ in prompts]
    requests = [Request(1) for _ in prompts]
    jobs = [
        Job(r.ticket, list(p), c, lookup=PromptLookup(p)) for r, p, c in zip(requests, prompts, choices, strict=True)
    ]
    scheduler.submit(jobs)
    for _ in steps(scheduler):
        for slot in scheduler.slots:
            assert model.holds(slot.sequence) == slot.tokens
    assert model.failed and not scheduler.broken and not scheduler.violations()
    ended = [r for r in requests if any(isinstance(item, InternalError) for item in r.items)]
    assert len(ended) == 1 and scheduler.faults == 1
    (finished,) = [r for r in requests if r not in ended]
    assert finished.items[-1] is END and isinstance(finished.items[-2], Finish)


def unrepeating(held: list[int]) -> int:
    """A token no shorter ending of the sequence predicts: its own past never drafts it right."""
    return 20 + hash(tuple(held)) % 97


def test_a_reply_written_before_is_drafted_from_the_memory_of_replies() -> None:
    prompt = list(range(1, 20))

    def answered(drafting: Drafting) -> tuple[list[int], int]:
        model = Model(1)
        scheduler = Scheduler(model, slots=1, batch=64, chunk=16, drafting=drafting)
        choice = Oracle(model, unrepeating, 40)
        before = drafting.accepted
        scheduler.submit([Job(Request(1).ticket, list(prompt), choice, lookup=drafting.index(prompt, True))])
        drain(scheduler)
        return choice.out, drafting.accepted - before

    [plain], _, _ = run([prompt], unrepeating, 40, None)
    remembering = Drafting(SpeculationRules(draft=8, memory=1000), capacity=256, payoff=Untimed())
    first, taken_first = answered(remembering)
    again, taken_again = answered(remembering)
    assert first == again == plain
    assert taken_first < 5 and taken_again > 30  # the second time, the first reply is drafted
    assert remembering.describe()["remembered"] == 39  # a run for each token the reply took before its last
    assert remembering.recalled_accepted == taken_again and remembering.recall.rate == 1.0
    forgetful = Drafting(SpeculationRules(draft=8, memory=0), capacity=256, payoff=Untimed())
    answered(forgetful)
    assert answered(forgetful)[1] < 5 and forgetful.describe()["remembered"] is None
    assert remembering.index(prompt, False) is None  # a request that opts out drafts nothing


def test_drafts_from_the_memory_are_judged_apart_from_the_sequences_own_lookup() -> None:
    """A sequence's lookup may guess badly (JSON values) where the memory, matching 12 tokens,
    does not: each has its own acceptance."""
    drafting = Drafting(SpeculationRules(draft=8, memory=100), capacity=100, payoff=Untimed())
    job = Job(Request(1).ticket, [1], Oracle(Model(1), hashed, 1))
    job.recalled = True
    drafting.settle(job, 8, 2, None)
    assert drafting.recall.rate is not None and drafting.recall.rate < 1.0
    assert job.acceptance.rate is None and drafting.payoff.prior is None
    assert (drafting.recalled_accepted, job.recalled, job.reach) == (2, False, 3)
    drafting.settle(job, 3, 1, None)  # a draft of its own lookup
    assert job.acceptance.rate == pytest.approx(1 / 3) and drafting.recalled_accepted == 2


def test_the_memorys_whole_drafts_run_on_past_the_lookup_draft_to_the_steps_budget() -> None:
    """A recalled draft taken whole doubles the next one's reach up to `step_tokens`, not the
    lookup's `draft`: a reply written before is decoded in steps as long as a step may be,
    while the sequence's own lookup keeps to `draft`, and its misses leave the reach."""
    prompt = list(range(1, 20))
    drafting = Drafting(SpeculationRules(draft=4, step_tokens=16, memory=1000), capacity=256, payoff=Untimed())

    def answered() -> tuple[list[int], list[int]]:
        model = Model(1)
        scheduler = Scheduler(model, slots=1, batch=64, chunk=32, drafting=drafting)
        choice = Oracle(model, unrepeating, 60)
        scheduler.submit([Job(Request(1).ticket, list(prompt), choice, lookup=drafting.index(prompt, True))])
        sizes = [len(model.last) for _ in steps(scheduler)]
        return choice.out, sizes

    [plain], _, _ = run([prompt], unrepeating, 60, None)
    first, first_sizes = answered()
    again, sizes = answered()
    assert first == again == plain
    assert first_sizes[0] == len(prompt) and max(first_sizes[1:]) <= 1 + 4  # the first time: the lookup's reach
    assert max(sizes[1:]) == 16 and len(sizes) <= 8  # 60 tokens: 5, 9, then steps of 16
    job = Job(Request(1).ticket, [1], Oracle(Model(1), hashed, 1))
    job.recalled = True
    drafting.settle(job, 16, 16, None)
    assert job.reach == 16
    drafting.settle(job, 3, 0, None)  # a draft of its own lookup, refused: its odds learn, the reach stays
    assert job.reach == 16


class BrokenMemory(ReplyMemory):
    """Fails every recall and every reply it is taught."""

    def follow(self, ending: Sequence[int], most: int) -> list[int]:
        raise RuntimeError("recall failed")

    def learn(self, tokens: Sequence[int]) -> None:
        raise RuntimeError("learning failed")


def test_a_memory_that_fails_costs_its_drafts_only() -> None:
    """A fault in recalling or remembering leaves the sequences to decode without the memory,
    the scheduler whole and every reply the same."""
    prompt = list(range(1, 20))
    [plain], _, _ = run([prompt], unrepeating, 30, None)
    drafting = Drafting(SpeculationRules(draft=8, memory=100), capacity=256, payoff=Untimed())
    drafting.memory = BrokenMemory(100)
    for _ in range(2):
        model = Model(1)
        scheduler = Scheduler(model, slots=1, batch=64, chunk=16, drafting=drafting)
        choice, request = Oracle(model, unrepeating, 30), Request(1)
        scheduler.submit([Job(request.ticket, list(prompt), choice, lookup=drafting.index(prompt, True))])
        drain(scheduler)
        assert choice.out == plain and request.items[-1] is END
        assert not scheduler.broken and scheduler.faults == 0
    assert drafting.recalled == 0
