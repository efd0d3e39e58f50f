"""Whether drafts pay: the step cost fitted from timed steps, the acceptance a draft needs beside
a busier batch, and the scheduler stepping back for sequences whose drafts miss, with output
unchanged and no fewer tokens per unit of (modelled) step time."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from asgi_llm.engines.llamacpp.draft_payoff import PROBE, PROBE_TOKENS, Acceptance, DraftPayoff
from asgi_llm.engines.llamacpp.speculation import Drafting, DraftRequest, SpeculationRules

from .test_speculation import Rule, cyclic, hashed, scheduled, steps


def test_the_cost_is_fitted_from_steps_of_different_sizes() -> None:
    payoff = DraftPayoff()
    assert payoff.cost() is None and payoff.bar(4) == 0.0  # unmeasured: drafts go
    for tokens in [4, 4, 4, 4, 4]:
        payoff.timed(tokens, 0.010 + 0.002 * tokens)
    assert payoff.cost() is None  # one size says nothing of the slope
    for tokens in [4, 12, 6, 9, 4, 16]:
        payoff.timed(tokens, 0.010 + 0.002 * tokens)
    fixed, per_token = payoff.cost() or (0.0, 0.0)
    assert fixed == pytest.approx(0.010) and per_token == pytest.approx(0.002)
    assert payoff.bar(1) == pytest.approx(0.002 / 0.012)
    assert payoff.bar(4) == pytest.approx(0.008 / 0.018)
    assert payoff.bar(4) > payoff.bar(1)  # busier: drafts must do better


def test_a_fit_with_no_fixed_part_asks_drafts_to_be_taken_whole() -> None:
    payoff = DraftPayoff()
    for tokens in [1, 9, 1, 9, 2, 8]:  # a step of one token cheaper than the line through the rest
        payoff.timed(tokens, 0.040 * tokens - (0.030 if tokens == 1 else 0.0))
    fixed, _ = payoff.cost() or (1.0, 0.0)
    assert fixed < 0 and payoff.bar(1) == 1.0  # every token costs: no acceptance pays for a draft


def cpu_costs() -> DraftPayoff:
    """Steps timed as this CPU's bare decodes of the packaged Q4_1 model: 7.7 ms for one token,
    14.0 for two, 38.7 for nine (weights multiplied a row at a time)."""
    payoff = DraftPayoff()
    for _ in range(3):
        for tokens, ms in [(1, 7.7), (2, 14.0), (9, 38.7)]:
            payoff.timed(tokens, ms / 1000)
    return payoff


def test_each_step_size_costs_what_steps_of_it_lately_cost() -> None:
    payoff = cpu_costs()
    assert payoff.step_cost(2) == pytest.approx(0.0140)  # seen: its own recent cost
    fixed, per_token = payoff.cost() or (0.0, 0.0)
    assert payoff.step_cost(5) == pytest.approx(fixed + per_token * 5)  # unseen: the line's
    assert payoff.step_cost(2) > fixed + per_token * 2  # where the line undercharges a short draft
    for _ in range(20):
        payoff.timed(2, 0.010)  # the machine got faster at two tokens
    assert payoff.step_cost(2) == pytest.approx(0.010, rel=0.02)


def test_a_short_draft_must_be_taken_more_often_than_a_long_one() -> None:
    payoff, record = cpu_costs(), Acceptance()
    record.judged(10, 6)  # taken 60% of the time
    bar = payoff.bar(1)
    assert bar < 0.6 and payoff.allowance(record, bar, 8) == 8  # the line lets it draft
    assert payoff.keeps(record, 8, 1, 1)  # 4.8 tokens expected for 31 ms: as good as the step's own
    assert not payoff.keeps(record, 1, 1, 1)  # 0.6 of a token for 6.3 ms: not
    assert payoff.stepped_back == 1
    for _ in range(3):
        record.judged(10, 10)
    assert record.rate is not None and record.rate > 0.82
    assert payoff.keeps(record, 1, 1, 1)  # one taken over 82% of the time pays even short
    probe = Acceptance()
    probe.judged(10, 0)
    assert payoff.allowance(probe, bar, 8) == 0  # under the bar: no draft...
    while payoff.allowance(probe, bar, 8) != PROBE_TOKENS:
        pass
    assert payoff.keeps(probe, PROBE_TOKENS, 1, 1)  # ...but a probe's is kept: taken whole, it would pay


def test_a_probe_is_dropped_where_even_a_draft_taken_whole_would_not_pay() -> None:
    """Beside eight running sequences this CPU's step is full (every token costs about what a
    step of one does, measured: 39 ms for 8, 54 for 10): two drafted tokens cannot pay even
    if both are taken, so a probe, which only measures acceptance again, is not made there;
    beside four (30 ms, and 33 for 6) it is."""
    payoff = DraftPayoff()
    for _ in range(3):
        for tokens, ms in [(4, 29.6), (6, 33.3), (8, 39.3), (10, 54.0)]:
            payoff.timed(tokens, ms / 1000)
    probe = Acceptance()
    probe.judged(10, 0)
    probe.probing = True
    assert not payoff.keeps(probe, PROBE_TOKENS, 8, 8) and payoff.stepped_back == 1
    assert payoff.keeps(probe, PROBE_TOKENS, 4, 4)


def test_a_sequence_under_the_bar_steps_back_but_probes() -> None:
    payoff, record = DraftPayoff(), Acceptance()
    assert payoff.allowance(record, 0.0, 8) == 8  # nothing asked of drafts: all they find
    assert payoff.allowance(record, 0.5, 8) == PROBE_TOKENS  # its drafts not yet judged: a probe
    record.judged(8, 2)
    allowed = [payoff.allowance(record, 0.5, 8) for _ in range(2 * PROBE)]
    assert sorted(allowed)[-2:] == [PROBE_TOKENS] * 2 and allowed.count(0) == 2 * PROBE - 2
    assert payoff.stepped_back == 2 * PROBE - 2
    record.judged(8, 8)
    record.judged(8, 8)  # it drafts well now: recent drafts weigh most
    assert record.rate is not None and record.rate > 0.5 and payoff.allowance(record, 0.5, 8) == 8


def test_a_stepped_back_sequence_is_judged_on_what_it_would_have_drafted() -> None:
    record = Acceptance()
    record.judged(8, 1)
    low = record.rate
    record.watch([7, 8, 9])
    for token in (7, 8):
        record.picked(token)
        assert record.rate == low  # judged once the shadow is done, as a draft is after its step
    record.picked(9)  # its lookup's guess was the model's three picks: drafting would have paid
    assert not record.shadow and low is not None and record.rate is not None and record.rate > low
    record.picked(3)  # no shadow: nothing judged
    high = record.rate
    record.watch([7, 8, 9])
    record.watch([1])  # one shadow at a time
    record.picked(7)
    record.picked(3)  # a miss at the second: one of three
    assert not record.shadow and record.rate == pytest.approx(0.7 * high + 0.3 / 3)
    record.watch([7])
    record.picked(None)  # it drafted after all: the shadow goes unjudged
    assert not record.shadow and record.rate == pytest.approx(0.7 * high + 0.3 / 3)


class Pinned(DraftPayoff):
    """A payoff whose step cost is given, not timed: (fixed, per_token) in model time."""

    def __init__(self, fixed: float, per_token: float) -> None:
        super().__init__()
        self.pinned = (fixed, per_token)

    def cost(self) -> tuple[float, float]:
        return self.pinned

    def step_cost(self, tokens: int) -> float:
        return self.pinned[0] + self.pinned[1] * tokens


def run(rule: Rule, payoff: DraftPayoff | None, tokens: int = 60) -> tuple[list[list[int]], float, Drafting | None]:
    """Four streams of `rule`: their outputs, their aggregate tokens per unit of model time from
    their prompts' end while all four run (as four clients sending one request after another
    keep four running; a step costs 1 + 1 per token decoded: a CPU at a few streams, where every
    token costs), and the drafting."""
    prompts = [[1, 2, 3, 4, 1, 2, 3, 4, 5], [2, 3, 4, 2, 3, 4, 2], [6, 5, 6, 5, 6], [1, 1, 2, 2, 1, 1]]
    drafting = Drafting(SpeculationRules(draft=8), capacity=256, payoff=payoff) if payoff is not None else None
    model, scheduler, choices, _ = scheduled(prompts, rule, tokens, drafting)
    spent, rate, start = 0.0, 0.0, None
    for _ in steps(scheduler):
        if start is not None:
            spent += 1 + len(model.last)
        elif all(c.out for c in choices):  # the prompts read: the clock starts
            start = sum(len(c.out) for c in choices)
        if start is not None and not rate and any(len(c.out) >= tokens for c in choices):
            rate = (sum(len(c.out) for c in choices) - start) / spent
    return [c.out for c in choices], rate, drafting


def test_drafts_that_miss_beside_a_busy_batch_step_back_and_cost_no_throughput() -> None:
    plain, plain_rate, _ = run(hashed, None)
    always, always_rate, eager = run(hashed, Pinned(1.0, 0.0))  # drafts look free: always drafted
    judged, judged_rate, careful = run(hashed, Pinned(1.0, 1.0))  # at 4 streams a draft must hit 80%
    assert plain == always == judged
    assert eager is not None and careful is not None
    assert careful.payoff.stepped_back > 0 and careful.drafted < eager.drafted
    assert careful.describe()["stepped_back"] == careful.payoff.stepped_back  # the operator's view
    assert always_rate < 0.97 * plain_rate  # drafting whatever it costs is slower here
    assert judged_rate >= 0.97 * plain_rate  # stepping back is not


def test_drafts_that_hit_go_on_beside_a_busy_batch() -> None:
    plain, plain_rate, _ = run(cyclic(4), None)
    judged, judged_rate, careful = run(cyclic(4), Pinned(1.0, 1.0))
    assert judged == plain and careful is not None and careful.accepted > 100
    assert judged_rate >= plain_rate


class Convex(Pinned):
    """A line that asks drafts to be taken half the time at one stream, where a step of two tokens
    costs 1.8 of one (as on a CPU that multiplies weights a row at a time): one extra token pays
    only where it is taken 80% of the time."""

    def __init__(self) -> None:
        super().__init__(0.5, 0.5)

    def step_cost(self, tokens: int) -> float:
        return {1: 1.0, 2: 1.8}.get(tokens, 0.5 + 0.5 * tokens)


class Guesser:
    """A draft model that guesses one token: the rule's, right `hits` of every 10 guesses."""

    def __init__(self, rule: Rule, hits: int) -> None:
        self.rule, self.hits, self.asked = rule, hits, 0

    def draft(self, requests: Sequence[DraftRequest]) -> list[list[int]]:
        guesses = []
        for _, tokens, _ in requests:
            self.asked += 1
            right = self.rule(tokens)
            guesses.append([right if self.asked % 10 < self.hits else right + 1])
        return guesses


@pytest.mark.parametrize(("hits", "kept"), [(7, False), (10, True)])
def test_a_draft_models_short_guesses_are_held_to_their_cost(hits: int, kept: bool) -> None:
    rule, prompt = cyclic(4), [1, 2, 3, 4, 1]
    _, alone, plain, _ = scheduled([prompt], rule, 60, None)
    for _ in steps(alone):
        pass
    drafting = Drafting(SpeculationRules(draft=1), capacity=256, payoff=Convex())
    guesser = Guesser(rule, hits)
    drafting.use(guesser)
    _, scheduler, choices, _ = scheduled([prompt], rule, 60, drafting)
    for _ in steps(scheduler):
        pass
    assert choices[0].out == plain[0].out and len(plain[0].out) == 60  # the same output, guesses kept or not
    if kept:
        assert guesser.asked > 20 and drafting.drafted == guesser.asked and drafting.payoff.stepped_back == 0
    else:  # once its 70% is known, it is not asked (its guesses cost decodes) but every PROBEth time
        assert guesser.asked < 15 and drafting.payoff.stepped_back > 30


def test_a_draft_is_weighed_at_the_plain_steps_rate_against_what_it_adds_to_the_step_as_it_stands() -> None:
    """Beside four running sequences on this CPU (measured: 24 ms for a step of 4 tokens, 60
    for 12, 104 for 20), a token costs 5.9 ms in the plain step. A first draft of 8 taken 90% of
    the time is worth 42 ms and adds 37: kept. A second of 8 is worth as much but adds 44 to the
    step as the first left it: dropped. Weighed at that step's own rate (60 ms for 4 tokens),
    it had looked worth 109, and such steps came slower per token than plain ones."""
    payoff = DraftPayoff()
    for _ in range(3):
        for tokens, ms in [(4, 23.6), (12, 60.3), (20, 104.0)]:
            payoff.timed(tokens, ms / 1000)
    record = Acceptance(rate=0.9)
    record.asked = 1  # not a probe
    assert payoff.keeps(record, 8, 4, 4)
    record.asked = 1
    assert not payoff.keeps(record, 8, 12, 4)
    worse = Acceptance(rate=0.69)
    worse.asked = 1
    assert not payoff.keeps(worse, 8, 4, 4)  # at 69% not even the first
