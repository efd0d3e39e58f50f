"""A draft model (`speculative = "draft"`) with the packaged model drafting for itself: greedy
output is the target's own, token for token, alone and beside another stream; most guesses are
taken; a draft model of another vocabulary (gemma-3-270m) is refused at load, naming why; its
memory counts in the model's, before the load and after; a draft model that fails costs the
step its guesses only; a long prompt is caught up a chunk a step."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from asgi_llm import ModelConfig
from asgi_llm.config import default_model_path
from asgi_llm.core import ChatRequest, Message, SamplingParams
from asgi_llm.engines.gguf_metadata import read_facts
from asgi_llm.engines.llamacpp import LlamaCppEngine
from asgi_llm.engines.memory_estimate import estimate_memory
from asgi_llm.pool.residency import draft_cost

from .gemma import gemma_path
from .local_engine import local_engine, written

pytestmark = [pytest.mark.anyio, pytest.mark.model]

LONG = "Repeat after me, word for word: " + " ".join(["apple", "river", "stone"] * 12)
PROMPTS = ("List the days of the week.", "Count from one to twelve.", "What is the capital of France?")


def request(text: str, tokens: int = 32) -> ChatRequest:
    sampling = SamplingParams(max_tokens=tokens, temperature=0)
    return ChatRequest(model="m", messages=(Message("user", text),), sampling=sampling)


def drafting(**more: Any) -> ModelConfig:
    return ModelConfig(parallel=2, speculative="draft", draft_model=default_model_path(), **more)


@pytest.fixture(scope="module")
async def pair() -> AsyncIterator[tuple[LlamaCppEngine, LlamaCppEngine]]:
    async with local_engine(ModelConfig(parallel=2)) as plain, local_engine(drafting()) as drafted:
        yield plain, drafted


async def test_greedy_output_is_the_targets_and_most_guesses_are_taken(
    pair: tuple[LlamaCppEngine, LlamaCppEngine],
) -> None:
    # a fresh engine: once its steps are timed, a draft model as costly as the model steps back on
    # a CPU (draft_payoff.py), and the guesses this test counts would stop
    plain, _ = pair
    async with local_engine(drafting()) as drafted:
        assert drafted.runtime is not None and drafted.runtime.drafting is not None
        tally = drafted.runtime.drafting
        for text in PROMPTS:
            assert await written(drafted, request(text)) == await written(plain, request(text))
        assert tally.describe()["mode"] == "draft"
        assert tally.drafted > 40 and tally.accepted > 0.7 * tally.drafted  # the same model guesses itself


async def test_two_streams_draft_together_and_each_writes_its_own(
    pair: tuple[LlamaCppEngine, LlamaCppEngine],
) -> None:
    plain, drafted = pair
    alone = [await written(plain, request(text, 24)) for text in PROMPTS[:2]]
    together: list[object] = [None, None]

    async def one(i: int) -> None:
        together[i] = await written(drafted, request(PROMPTS[i], 24))

    async with anyio.create_task_group() as group:
        for i in range(2):
            group.start_soon(one, i)
    assert together == alone


async def test_a_failing_draft_model_costs_the_step_its_guesses_only(
    pair: tuple[LlamaCppEngine, LlamaCppEngine], caplog: pytest.LogCaptureFixture
) -> None:
    plain, _ = pair
    async with local_engine(drafting()) as drafted:  # fresh: it drafts (see the first test)
        runtime = drafted.runtime
        assert runtime is not None and runtime.drafter is not None
        decoder = runtime.drafter.decoder
        calls = {"n": 0}
        real = decoder.decode

        def flaky(batch: Any) -> None:
            calls["n"] += 1
            if calls["n"] % 3 == 0:
                raise RuntimeError("draft decode failed")
            real(batch)

        decoder.decode = flaky  # type: ignore[method-assign]
        try:
            with caplog.at_level(logging.ERROR, "asgi_llm.engine"):
                assert await written(drafted, request(PROMPTS[1])) == await written(plain, request(PROMPTS[1]))
        finally:
            del decoder.decode
        assert calls["n"] >= 3 and "the draft model failed" in caplog.text
        assert await written(drafted, request(PROMPTS[0])) == await written(plain, request(PROMPTS[0]))


async def test_its_memory_counts_before_and_after_the_load(pair: tuple[LlamaCppEngine, LlamaCppEngine]) -> None:
    plain, drafted = pair
    assert plain.runtime is not None and drafted.runtime is not None
    assert plain.runtime.memory is not None and drafted.runtime.memory is not None
    assert drafted.runtime.memory.weights > 1.9 * plain.runtime.memory.weights  # the same file twice
    assert drafted.runtime.memory.kv_cache >= 2 * plain.runtime.memory.kv_cache
    config = drafting()
    facts = read_facts(default_model_path())
    alone = estimate_memory(config, facts, 1000)
    extra = draft_cost(config, gpus=1)
    assert extra.weights > 0 and extra.kv_cache == alone.kv_cache and extra.prompt_cache == 0


async def test_a_draft_model_of_another_vocabulary_is_refused_at_load() -> None:
    config = ModelConfig(parallel=1, speculative="draft", draft_model=gemma_path())
    with pytest.raises(ValueError, match="draft_model has 262144 tokens where the model has 49152"):
        async with local_engine(config):
            pass


async def test_a_long_prompt_is_caught_up_a_chunk_a_step() -> None:
    # each engine's first request: with flash attention, what a slot held before can tip a near-tie
    # (docs/performance.md, "Speculative decoding"), and this prompt has one at its first token
    async with local_engine(ModelConfig(parallel=2, prefill_chunk=8)) as plain:
        alone = await written(plain, request(LONG))
    async with local_engine(drafting(prefill_chunk=8)) as chunked:
        runtime = chunked.runtime
        assert runtime is not None and runtime.drafter is not None and runtime.drafting is not None
        decoder = runtime.drafter.decoder
        read: list[int] = []  # each draft-model decode's tokens read without logits
        real = decoder.decode

        def counted(batch: Any) -> None:
            read.append(sum(not entry.logits for entry in batch))
            real(batch)

        decoder.decode = counted  # type: ignore[method-assign]
        assert await written(chunked, request(LONG)) == alone
        assert max(read) <= 8 and sum(read) > 3 * 8  # the prompt over several steps, 8 tokens at most each
        assert runtime.drafting.drafted > 0  # and it guessed once it had caught up
