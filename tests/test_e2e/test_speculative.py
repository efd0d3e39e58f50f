"""Speculative decoding (prompt lookup) with the packaged model: greedy output is the same token
for token as without it, over generated prompts and lengths, and where a reply repeats its
prompt most drafted tokens are taken, several a decode."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from asgi_llm import ModelConfig
from asgi_llm.core import ChatRequest, CompletionRequest, GenerationRequest, Message, OutputFormat, SamplingParams
from asgi_llm.engines.llamacpp import LlamaCppEngine
from asgi_llm.engines.llamacpp.draft_payoff import DraftPayoff

from .local_engine import local_engine, written

pytestmark = [pytest.mark.anyio, pytest.mark.model]

WEEK = "monday tuesday wednesday thursday friday saturday sunday\n"
TOPICS = iter(
    [
        "a lighthouse keeper and her cat",
        "a baker who races bicycles up volcanoes",
        "a violin maker in a desert town",
        "an astronomer who counts moths",
        "a ferry pilot who collects maps",
        "a beekeeper on a city rooftop",
    ]
)
"""One for each asking that must be new to the engine (whose memory outlives a test)."""
WORDS = ["the", "river", "stone", "light", "code", "value", "items", "price", "count", "green", "over", "and"]


async def reply(
    engine: LlamaCppEngine, text: str, tokens: int, *, speculative: bool = True, chat: bool = True
) -> tuple[str, str, int]:
    params = SamplingParams(max_tokens=tokens, temperature=0, speculative=speculative)
    request: GenerationRequest = (
        ChatRequest(model="m", messages=(Message("user", text),), sampling=params)
        if chat
        else CompletionRequest(model="m", prompts=(text,), sampling=params)
    )
    return await written(engine, request)


@pytest.fixture(scope="module")
async def pair() -> AsyncIterator[tuple[LlamaCppEngine, LlamaCppEngine]]:
    async with (
        local_engine(ModelConfig(parallel=2)) as plain,
        local_engine(ModelConfig(parallel=2, speculative="ngram")) as drafting,
    ):
        yield plain, drafting


async def test_a_reply_that_repeats_its_prompt_takes_drafts_and_writes_the_same(
    pair: tuple[LlamaCppEngine, LlamaCppEngine],
) -> None:
    """A completion of a repeating list: the model goes on repeating it, as drafted."""
    plain, drafting = pair
    prompt = WEEK * 2 + "monday tuesday"
    tally = drafting.runtime.drafting if drafting.runtime is not None else None
    assert tally is not None
    before = tally.drafted, tally.accepted
    wrote = await reply(drafting, prompt, 64, chat=False)
    assert wrote == await reply(plain, prompt, 64, chat=False)
    assert wrote[0].startswith(" wednesday thursday")
    drafted, accepted = tally.drafted - before[0], tally.accepted - before[1]
    # most of the 64 tokens came several a decode (a new sequence's first draft is short where
    # the model's acceptance so far, over the other tests' random prompts, is under the step's bar)
    assert 40 < accepted <= drafted
    again = tally.drafted
    assert await reply(drafting, prompt, 64, chat=False, speculative=False) == wrote
    assert tally.drafted == again  # the request opted out


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(
    words=st.lists(st.sampled_from(WORDS), min_size=3, max_size=30),
    repeat=st.booleans(),
    tokens=st.integers(1, 48),
)
async def test_greedy_output_is_the_same_with_drafts_as_without(
    pair: tuple[LlamaCppEngine, LlamaCppEngine], words: list[str], repeat: bool, tokens: int
) -> None:
    text = " ".join(words)
    ask = f"Copy this line twice: {text}" if repeat else text
    assert await reply(pair[1], ask, tokens) == await reply(pair[0], ask, tokens)


class Flat(DraftPayoff):
    """Steps priced as a GPU's, nearly the same at any size: every draft pays. Whether drafts pay on
    this machine's timed steps is test_draft_payoff's; here, what the memory drafts."""

    def timed(self, tokens: int, seconds: float) -> None:
        pass

    def cost(self) -> tuple[float, float]:
        return 1.0, 0.01

    def step_cost(self, tokens: int) -> float:
        return 1.0 + 0.01 * tokens


@pytest.fixture
def priced_flat(pair: tuple[LlamaCppEngine, LlamaCppEngine], monkeypatch: pytest.MonkeyPatch) -> None:
    """The drafting engine's steps priced flat for one test: on a slow 2-core machine a step of 16
    tokens timed at 13 single ones, and the memory's drafts then paid or not with the noise."""
    tally = pair[1].runtime.drafting if pair[1].runtime is not None else None
    assert tally is not None
    monkeypatch.setattr(tally, "payoff", Flat())


@pytest.mark.usefixtures("priced_flat")
async def test_a_reply_asked_for_again_is_drafted_from_the_first_and_is_the_same(
    pair: tuple[LlamaCppEngine, LlamaCppEngine],
) -> None:
    """A story has nothing to copy from its prompt; asked again, the model's memory of its reply
    drafts it, and every drafted token is the model's own."""
    plain, drafting = pair
    tally = drafting.runtime.drafting if drafting.runtime is not None else None
    assert tally is not None and tally.memory is not None
    ask = f"Write two sentences about {next(TOPICS)}."  # a topic new to the engine: nothing remembered
    taken = []
    for _ in range(2):
        before = tally.accepted
        wrote = await reply(drafting, ask, 48)
        taken.append(tally.accepted - before)
        assert wrote == await reply(plain, ask, 48)
    assert taken[1] > max(30, 2 * taken[0])


@pytest.mark.usefixtures("priced_flat")
async def test_a_structured_reply_asked_for_again_is_recalled_from_the_memory_judged_apart(
    pair: tuple[LlamaCppEngine, LlamaCppEngine],
) -> None:
    """JSON values are not in the prompt, so a sequence's lookup guesses them badly; the memory,
    judged apart from it, drafts the reply it wrote before, keys and values."""
    plain, drafting = pair
    tally = drafting.runtime.drafting if drafting.runtime is not None else None
    assert tally is not None
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}, "city": {"type": "string"}},
        "required": ["name", "age", "city"],
    }
    params = SamplingParams(
        max_tokens=80, temperature=0, output_format=OutputFormat("json_schema", "response_format", schema)
    )
    request = ChatRequest(model="m", messages=(Message("user", f"Describe {next(TOPICS)} as JSON."),), sampling=params)
    recalled = []
    for _ in range(2):
        before = tally.recalled_accepted
        assert await written(drafting, request) == await written(plain, request)
        recalled.append(tally.recalled_accepted - before)
    assert recalled[0] < 5 and recalled[1] > 15
    health = drafting.health()  # what /metrics reads
    assert (health.recalled, health.recalled_accepted) == (tally.recalled, tally.recalled_accepted)
    assert health.remembered == len(tally.memory or ()) > 0 and plain.health().remembered == 0
