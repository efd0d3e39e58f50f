"""Grammar jump-forward in the scheduler: where a choice's grammar allows one text only, its tokens
are drafted (the last one while such last tokens are taken) and decoded beside the next token; the
choice's picks keep them or not, as any draft, so the output is the same and the cache holds only
what was picked.

Tokens here are characters (`ord`); a choice writes its script, and its "grammar" forces the
script's upper-case runs (as a schema forces a key's rest)."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from asgi_llm.core import Finish, TextDelta, Usage
from asgi_llm.core.events import EngineEvent, GenerationEvent
from asgi_llm.engines.llamacpp.batching import Scheduler, Slot
from asgi_llm.engines.llamacpp.draft_payoff import PROBE
from asgi_llm.engines.llamacpp.jobs import Job, Turn
from asgi_llm.engines.llamacpp.lookup import PromptLookup
from asgi_llm.engines.llamacpp.speculation import Drafting, SpeculationRules, Spell, Tail

from .sequence_model import Model, Request, Untimed


class Script:
    """Writes `script`, one character a step, checking that each row it is given holds the token
    it picked before; while upper case follows, `forced` says so (a grammar's forced text)."""

    greedy = False

    def __init__(self, model: Model, script: str, prompt: list[int]) -> None:
        self.model, self.script, self.out = model, script, ""
        self.last = prompt[-1]
        self.asked: list[str] = []

    def begin(self, cached: int) -> Sequence[EngineEvent]:
        return ()

    def forced(self) -> str:
        rest = self.script[len(self.out) :]
        upper = rest[: len(rest) - len(rest.lstrip("ABCDEFGHIJKLMNOPQRSTUVWXYZ"))]
        self.asked.append(upper)
        return upper

    def step(self, row: int, top: int | None = None) -> Turn:
        entry = self.model.last[row]
        assert entry.logits and entry.token == self.last, "a row that is not the one after its last pick"
        char = self.script[len(self.out)]
        self.out += char
        self.last = ord(char)
        events: list[GenerationEvent] = [TextDelta(char)]
        if len(self.out) == len(self.script):
            return Turn([*events, Finish("stop", Usage(0, len(self.out), 0))], None)
        return Turn(events, ord(char))

    def close(self) -> None:
        pass


def characters(token: int, text: str) -> list[int]:
    return [ord(c) for c in text]


def merged(token: int, text: str) -> list[int]:
    """A vocabulary that spells the forced text otherwise than the model writes it: pairs as one token."""
    return [1000 + ord(text[i]) for i in range(0, len(text), 2)]


PROMPT = [ord(c) for c in "write: "]


def run(script: str, spell: Spell | None, *, lookup: bool = False, step_tokens: int = 16) -> tuple[str, int, Drafting]:
    """The output, the decodes it took, and the drafting's tally; the books checked every step."""
    model = Model(1)
    drafting = Drafting(
        SpeculationRules(step_tokens=step_tokens, lookup=lookup), capacity=512, payoff=Untimed(), spell=spell
    )
    scheduler = Scheduler(model, slots=1, batch=64, chunk=64, drafting=drafting)
    choice = Script(model, script, PROMPT)
    job = Job(Request(1).ticket, list(PROMPT), choice, lookup=PromptLookup(PROMPT) if lookup else None)
    scheduler.submit([job])
    decodes = 0
    while scheduler.active:
        assert scheduler.step()
        decodes += 1
        slot = scheduler.slots[0]
        assert model.holds(slot.sequence) == slot.tokens
        assert not job.draft and not scheduler.violations()
    return choice.out, decodes, drafting


SCRIPT = 'x{"NAME": a, "OCCUPATION": b}'


def test_forced_text_is_drafted_and_taken_whole_in_fewer_decodes() -> None:
    plain, plain_decodes, _ = run(SCRIPT, None)
    out, decodes, drafting = run(SCRIPT, characters)
    assert out == plain == SCRIPT
    assert drafting.forced == drafting.forced_accepted == drafting.accepted == drafting.drafted > 0
    # each upper-case run comes in the decode before it: 4 + 10 fewer decodes
    assert decodes == plain_decodes - len("NAME") - len("OCCUPATION")


def test_a_forced_text_spelled_otherwise_is_refused_and_the_output_is_the_same() -> None:
    plain, plain_decodes, _ = run(SCRIPT, None)
    out, decodes, drafting = run(SCRIPT, merged)
    assert out == plain
    assert drafting.drafted > 0 and drafting.accepted == 0 and decodes == plain_decodes


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    script=st.text("abAB{}", min_size=1, max_size=40),
    spell=st.sampled_from([characters, merged]),
    lookup=st.booleans(),
    step_tokens=st.integers(1, 12),
)
def test_output_is_the_same_with_forced_and_looked_up_drafts(
    script: str, spell: Spell, lookup: bool, step_tokens: int
) -> None:
    out, _, drafting = run(script, spell, lookup=lookup, step_tokens=step_tokens)
    assert out == script
    assert drafting.forced_accepted <= drafting.forced and drafting.accepted <= drafting.drafted


def test_the_step_budget_holds_forced_drafts_too() -> None:
    _, _, none = run(SCRIPT, characters, step_tokens=1)  # the running sequence fills the step
    assert none.drafted == 0
    _, _, some = run(SCRIPT, characters, step_tokens=3)
    assert 0 < some.drafted and some.forced == some.drafted


def test_lookup_drafts_after_the_forced_ones() -> None:
    drafting = Drafting(SpeculationRules(draft=4), capacity=64, payoff=Untimed(), spell=characters)
    history = [ord(c) for c in "ABCDEF xyz ABC"]
    model = Model(1)
    choice = Script(model, "DEF", history)
    job = Job(Request(1).ticket, history, choice, lookup=PromptLookup(history, longest=3, shortest=2))
    job.slot, job.token = Slot(0, tokens=list(history)), ord("C")
    choice.script = "DEf"
    drafting.propose([job], 64)
    assert choice.asked == ["DE"]
    assert job.draft == [ord(c) for c in "DEF xy"]  # DE forced, then the 4 tokens that followed "CDE"
    assert job.forced == 2
    drafting.settle(job, len(job.draft), 2, None)  # D and E taken: the lookup's draft missed at its first
    assert (drafting.accepted, drafting.forced_accepted) == (2, 2)
    assert drafting.odds.expected(job.agreement, 1)[0] < 1.0  # the odds of its match learned the miss
    assert drafting.tails[ord("E")].rate == 1.0  # the forced text's last token, as spelled, was taken


def test_without_a_spelling_nothing_forced_is_asked_for() -> None:
    out, _, drafting = run(SCRIPT, None)
    assert out == SCRIPT and drafting.drafted == 0


def last_merged(token: int, text: str) -> list[int]:
    """A vocabulary that spells a text as the model writes it but for its last character, which it
    merges with whatever follows (as `ap` of an enum's `apple`)."""
    return [ord(c) for c in text[:-1]] + [1000 + ord(text[-1])]


def test_a_last_token_the_model_refuses_stops_being_drafted_but_for_probes() -> None:
    script = "x" + "AB a " * 40  # 40 forced runs, each ending in the same token
    plain, _, _ = run(script, None)
    out, _, drafting = run(script, last_merged)
    assert out == plain == script
    refused = drafting.forced - drafting.forced_accepted  # only last tokens are refused here
    assert drafting.forced_accepted > 0 and 1 <= refused <= 1 + 40 // PROBE
    tail = drafting.tails[1000 + ord("B")]
    assert tail.rate is not None and tail.rate < 0.5 and tail.asked == 40


def test_each_last_token_is_judged_apart() -> None:
    drafting = Drafting(SpeculationRules(lookup=False), capacity=64, payoff=Untimed(), spell=characters)
    drafting.tails[ord("B")] = refused = Tail()
    refused.judged(False)  # refused where it ended a forced text: not drafted there next
    model = Model(1)
    for forced, drafted in (("AB", "A"), ("AC", "AC")):
        choice = Script(model, "", PROMPT)
        choice.forced = lambda text=forced: text  # type: ignore[method-assign]
        job = Job(Request(1).ticket, list(PROMPT), choice)
        job.slot, job.token = Slot(0, tokens=list(PROMPT)), ord(" ")
        drafting.propose([job], 64)
        assert job.draft == [ord(c) for c in drafted]


def _tailed(drafting: Drafting) -> Job:
    """A sequence whose forced draft "AB" ends with its last token."""
    choice = Script(Model(1), "", PROMPT)
    choice.forced = lambda: "AB"  # type: ignore[method-assign]
    job = Job(Request(1).ticket, list(PROMPT), choice)
    job.slot, job.token = Slot(0, tokens=list(PROMPT)), ord(" ")
    drafting.propose([job], 64)
    assert job.draft == [ord("A"), ord("B")] and job.tail == ord("B")
    return job


def test_a_last_token_the_output_ended_before_is_not_judged() -> None:
    drafting = Drafting(SpeculationRules(lookup=False), capacity=64, payoff=Untimed(), spell=characters)
    job = _tailed(drafting)
    drafting.settle(job, 2, 1, None)  # A taken, then the output ended: B was never refused
    assert drafting.tails[ord("B")].rate is None and job.tail is None
    job = _tailed(drafting)
    drafting.settle(job, 2, 1, ord("x"))  # A taken, then the model wrote another token where B was
    assert drafting.tails[ord("B")].rate == 0.0


def test_a_tally_dropped_between_a_draft_and_its_picks_is_made_again() -> None:
    drafting = Drafting(SpeculationRules(lookup=False), capacity=64, payoff=Untimed(), spell=characters)
    job = _tailed(drafting)
    drafting.tails.clear()  # as when another sequence's new ending fills the tallies this step
    drafting.settle(job, 2, 2, ord("x"))
    assert drafting.tails[ord("B")].rate == 1.0
