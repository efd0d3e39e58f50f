"""The odds of a lookup draft's tokens by the match it follows, and the length a step keeps:
a draft after a long agreement runs on where one after a common phrase is cut or dropped."""

from __future__ import annotations

from typing import ClassVar

import pytest

from asgi_llm.engines.llamacpp.draft_odds import DraftOdds
from asgi_llm.engines.llamacpp.draft_payoff import Acceptance, DraftPayoff
from asgi_llm.engines.llamacpp.speculation import Drafting, SpeculationRules

from .test_speculation import Rule, cyclic, scheduled, steps


def test_a_class_begins_at_the_odds_measured_for_its_matches() -> None:
    odds = DraftOdds(8)
    assert odds.expected(3, 3) == pytest.approx([0.65, 0.65 + 0.65**2, 0.65 + 0.65**2 + 0.65**3])
    assert odds.expected(40, 1) == pytest.approx([0.97]) and odds.expected(5, 1) == pytest.approx([0.78])
    assert len(odds.expected(3, 20)) == 8  # no deeper than the most a draft holds


def test_odds_are_kept_per_class_of_match_and_per_depth() -> None:
    odds = DraftOdds(8)
    for _ in range(50):
        odds.judged(2, 8, 0)  # after a match of two tokens the first drafted token is refused
        odds.judged(40, 8, 8)  # after forty, the whole draft is taken
    short, long = odds.expected(3, 8), odds.expected(33, 8)  # 3 shares 2's class (2-3), 33 shares 40's (32-63)
    assert short[0] < 0.05 and short[-1] == pytest.approx(short[0] * sum(0.65**k for k in range(8)))  # through it
    assert long == pytest.approx([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0], rel=0.02)  # the prior outweighed
    assert odds.expected(5, 2) == pytest.approx([0.78, 0.78 + 0.78**2])  # another class: untouched


def test_only_the_depths_a_draft_reached_are_judged() -> None:
    odds = DraftOdds(8)
    for _ in range(50):
        odds.judged(10, 8, 2)  # two taken, the third refused: the rest never reached the model
    first, second, third, fourth = odds.expected(10, 4)
    assert first == pytest.approx(1.0, rel=0.01) and second == pytest.approx(2.0, rel=0.02)
    assert third - second < 0.05  # the third is refused where the two before it were taken
    assert fourth - third == pytest.approx(0.85 * (third - second))  # never judged: its class's prior (8-15)


def cpu_costs() -> DraftPayoff:
    """Bare decodes of the packaged Q4_1 model on a 2-core CPU (benchmarks/draft_bound.py), ms:
    1: 10.5, 2: 17.4, 3: 23.8, 5: 32.4, 9: 48.7; every size between them timed on the line."""
    payoff = DraftPayoff()
    measured = {1: 10.5, 2: 17.4, 3: 23.8, 4: 28.1, 5: 32.4, 6: 36.5, 7: 40.6, 8: 44.6, 9: 48.7}
    for _ in range(3):
        for tokens, ms in measured.items():
            payoff.timed(tokens, ms / 1000)
    return payoff


def plain() -> Acceptance:
    record = Acceptance(rate=0.8)
    record.asked = 1  # not a probe
    return record


def test_the_operator_sees_each_class_of_match_by_its_lengths() -> None:
    odds = DraftOdds(4)
    for _ in range(50):
        odds.judged(3, 4, 0)  # after a match of three, the first drafted token is refused
        odds.judged(20, 4, 2)  # after twenty, two taken and the third refused
    view = odds.describe()
    assert list(view) == ["0", "1", "2-3", "4-7", "8-15", "16-31", "32-63", "64+"]
    assert view["2-3"]["first"] < 0.05 and view["2-3"]["whole"] < 0.2
    assert view["16-31"]["first"] > 0.99 and 2.0 <= view["16-31"]["whole"] < 2.1
    assert view["64+"] == {"first": 0.97, "whole": round(sum(0.97**k for k in range(1, 5)), 2)}  # its prior


def test_a_draft_is_cut_where_its_next_token_no_longer_pays() -> None:
    payoff = cpu_costs()
    sure = [0.97 * k for k in range(1, 9)]  # (near enough) every token taken: the whole draft
    assert payoff.length(plain(), sure, 1, 1) == 8
    coin = []  # each next token taken half the time: 0.5, 0.75, ...: even one does not pay its 6.9 ms
    for k in range(1, 9):
        coin.append((coin[-1] if coin else 0.0) + 0.5**k)
    assert payoff.length(plain(), coin, 1, 1) == 0 and payoff.stepped_back == 1
    front = [0.95, 1.9, 2.2, 2.3, 2.35, 2.4, 2.45, 2.5]  # two likely tokens, then a likely miss
    assert payoff.length(plain(), front, 1, 1) == 2


def test_a_probe_is_judged_whole_and_unmeasured_costs_keep_the_draft() -> None:
    probe = Acceptance(rate=0.1)
    probe.probing = True
    assert cpu_costs().length(probe, [0.1, 0.2], 1, 1) == 2  # taken whole it would pay: measured again
    assert DraftPayoff().length(plain(), [0.1, 0.2, 0.3], 1, 1) == 3  # no step timed yet


def test_the_odds_and_the_costs_together_draft_a_copy_and_not_a_phrase() -> None:
    odds, payoff = DraftOdds(8), cpu_costs()
    for _ in range(40):  # as measured with the packaged model: short matches mislead, long ones do not
        odds.judged(2, 8, 0)
        odds.judged(2, 8, 3)
        odds.judged(20, 8, 8)
    assert payoff.length(plain(), odds.expected(2, 8), 1, 1) == 0
    assert payoff.length(plain(), odds.expected(20, 8), 1, 1) == 8


class Measured(DraftPayoff):
    """Step costs as this CPU's bare decodes, not timed: two tokens cost 1.75 single ones."""

    COSTS: ClassVar[dict[int, float]] = {
        1: 10.5,
        2: 17.4,
        3: 23.8,
        4: 28.1,
        5: 32.4,
        6: 36.5,
        7: 40.6,
        8: 44.6,
        9: 48.7,
    }

    def timed(self, tokens: int, seconds: float) -> None:
        pass  # the test's model takes no time

    def cost(self) -> tuple[float, float]:
        return 6.4, 4.3

    def step_cost(self, tokens: int) -> float:
        return self.COSTS.get(tokens, 6.4 + 4.3 * tokens)


def one_stream(prompt: list[int], rule: Rule, drafting: Drafting | None) -> tuple[list[int], float]:
    """One stream's reply of 80 tokens and its modelled decode time after the prompt."""
    model, scheduler, choices, _ = scheduled([prompt], rule, 80, drafting)
    spent, decoding = 0.0, False
    for _ in steps(scheduler):
        if decoding:  # a step after the one that read the prompt
            spent += Measured.COSTS.get(len(model.last), 6.4 + 4.3 * len(model.last))
        decoding = bool(choices[0].out)
    return choices[0].out, spent


def drifting(held: list[int]) -> int:
    """A token of the last two and the position: the same few tokens recur, what follows them not."""
    return hash((*held[-2:], len(held))) % 5


def test_one_stream_at_cpu_costs_drafts_a_copy_whole_and_learns_to_drop_guesses_that_miss() -> None:
    passage = list(range(100, 162))  # 62 tokens, none repeated
    copy = one_stream(passage, cyclic(62), None)
    drafting = Drafting(SpeculationRules(draft=8), capacity=512, payoff=Measured())
    copied = one_stream(passage, cyclic(62), drafting)
    assert copied[0] == copy[0]
    assert copied[1] < 0.6 * copy[1]  # the reply copies its prompt: 9 tokens for 48.7 ms, not 94.5
    assert drafting.accepted > 0.9 * drafting.drafted
    noise = [i % 5 for i in range(40)]
    plain = one_stream(noise, drifting, None)
    drafted, costs = [], []
    for _ in range(6):  # the same model's requests, one after another: its odds learn
        before = drafting.drafted
        out, spent = one_stream(noise, drifting, drafting)
        assert out == plain[0]
        drafted.append(drafting.drafted - before)
        costs.append(spent)
    assert drafted[-1] < drafted[0] and costs[-1] < costs[0]
    # what is left: probes (every 16th asking), lucky matches, and long matches this text misleads
    # before their class has outweighed the prior of the texts the odds were measured on
    assert costs[-1] <= 1.06 * plain[1]
    seen = drafting.describe()["lookup_odds"]  # the operator's view: the noise's short matches, the copy's long ones
    assert isinstance(seen, dict) and seen["4-7"]["first"] < 0.2
    assert seen["16-31"]["first"] > 0.95 and seen["16-31"]["whole"] > 7.0
    copied_again = one_stream(passage, cyclic(62), drafting)
    # the long matches' odds stand; only its first tokens, before the agreement is long, wait
    assert copied_again[1] < 0.65 * copy[1]
