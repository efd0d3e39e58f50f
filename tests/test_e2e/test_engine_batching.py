"""The llama.cpp engine's continuous batching with the real model: choices decoded together give
the same tokens as alone, slots free at once, the queue is FIFO and bounded, prefixes are reused."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from asgi_llm import ModelConfig
from asgi_llm.core import ChatRequest, CompletionRequest, Finish, Message, Overloaded, SamplingParams, TextDelta
from asgi_llm.core.requests import GenerationRequest
from asgi_llm.engines.llamacpp import LlamaCppEngine

from .local_engine import local_engine

pytestmark = [pytest.mark.anyio, pytest.mark.model]
KEEP_TALKING = ((0, -100.0), (2, -100.0))  # tokens 0 and 2 end SmolLM2's turn
QUESTIONS = (
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "Count from 1 to 10.",
    "Explain gravity in one sentence.",
)



def chat(text: str | tuple[Message, ...], max_tokens: int = 48, n: int = 1, **sampling: object) -> ChatRequest:
    params = SamplingParams(max_tokens=max_tokens, **{"temperature": 0, **sampling})  # type: ignore[arg-type]
    messages = (Message("user", text),) if isinstance(text, str) else text
    return ChatRequest(model="m", messages=messages, sampling=params, n=n)


def engine_with(**options: object) -> contextlib.AbstractAsyncContextManager[LlamaCppEngine]:
    return local_engine(ModelConfig(**{"n_ctx": 1024, **options}))  # type: ignore[arg-type]


async def collect(engine: LlamaCppEngine, request: GenerationRequest) -> tuple[dict[int, str], list[Finish]]:
    texts: dict[int, str] = {}
    finishes = []
    async for event in engine.generate(request):
        if isinstance(event, TextDelta):
            texts[event.index] = texts.get(event.index, "") + event.text
        elif isinstance(event, Finish):
            finishes.append(event)
    return texts, finishes


async def test_batched_outputs_equal_outputs_alone() -> None:
    """Each prompt is read once first: llama.cpp's matrix kernels sum in a different order for a
    long prompt chunk than for a few rows, so a prompt's first reading fixes its last digits. From
    there on a choice decoded beside three others must give exactly the tokens it gives alone."""
    async with engine_with(parallel=4) as engine:
        for question in QUESTIONS:
            await collect(engine, chat(question))
        alone = [(await collect(engine, chat(question)))[0][0] for question in QUESTIONS]
        before = engine.decoded_tokens
        together = await asyncio.gather(*(collect(engine, chat(question)) for question in QUESTIONS))
        assert [texts[0] for texts, _ in together] == alone
        assert engine.decoded_tokens - before == sum(f[0].usage.completion_tokens for _, f in together)


async def test_n_choices_decode_side_by_side_from_one_prompt_reading() -> None:
    async with engine_with(parallel=4) as engine:
        texts, finishes = await collect(engine, chat(QUESTIONS[1], n=3))
        sampled, _ = await collect(engine, chat(QUESTIONS[1], n=3, temperature=1.0, seed=7))
    assert sorted(texts) == [0, 1, 2] and texts[0] == texts[1] == texts[2]  # greedy: the same three times
    assert [f.usage.prompt_tokens > 0 for f in sorted(finishes, key=lambda f: f.index)] == [True, False, False]
    assert len(set(sampled.values())) == 3  # seeds differ per choice


async def test_completion_prompts_and_choices_all_arrive() -> None:
    request = CompletionRequest(
        model="m", prompts=("The sky is", "Water is"), sampling=SamplingParams(max_tokens=8, temperature=0), n=3
    )
    async with engine_with(parallel=4) as engine:  # six choices on four sequences
        texts, finishes = await collect(engine, request)
    assert sorted(f.index for f in finishes) == list(range(6))
    assert texts[0] == texts[1] == texts[2] and texts[3] == texts[4] == texts[5] and texts[0] != texts[3]


async def test_a_repeated_conversation_reports_its_prefix_as_cached() -> None:
    async with engine_with(parallel=2) as engine:
        first = (Message("user", QUESTIONS[0]),)
        texts, finishes = await collect(engine, chat(first))
        second = (*first, Message("assistant", texts[0]), Message("user", "And of Italy?"))
        _, again = await collect(engine, chat(second))
    grown = again[0].usage
    assert grown.cached_tokens >= finishes[0].usage.prompt_tokens - 1
    assert grown.cached_tokens < grown.prompt_tokens


async def test_a_cancelled_stream_frees_its_sequence_at_once() -> None:
    async with engine_with(parallel=1) as engine:
        long = engine.generate(chat(QUESTIONS[1], max_tokens=600, logit_bias=KEEP_TALKING))
        async with contextlib.aclosing(long):
            await long.__anext__()
        before = engine.decoded_tokens
        _, finishes = await collect(engine, chat(QUESTIONS[0], max_tokens=8))
        assert finishes[0].usage.completion_tokens == 8
        assert engine.decoded_tokens - before <= 8 + 2  # the cancelled one stopped within a step or two


async def test_queue_is_fifo_bounded_and_a_client_leaving_the_queue_costs_nothing() -> None:
    async with engine_with(parallel=1, max_queue=1) as engine:
        running = engine.generate(chat(QUESTIONS[1], max_tokens=40, logit_bias=KEEP_TALKING))
        async with contextlib.aclosing(running):
            await running.__anext__()
            waiting = asyncio.ensure_future(collect(engine, chat(QUESTIONS[0], max_tokens=4)))
            while engine.waiting < 1:
                await asyncio.sleep(0.001)
            refused = engine.generate(chat(QUESTIONS[2]))
            with pytest.raises(Overloaded):
                await refused.__anext__()
            leaving = asyncio.ensure_future(collect(engine, chat(QUESTIONS[3], max_tokens=30)))
            await asyncio.sleep(0)
            rest = [event async for event in running]
        # the queue was full when `leaving` came: it was refused; `waiting` ran next, in order
        with pytest.raises(Overloaded):
            await leaving
        _, finishes = await waiting
        assert finishes[0].usage.completion_tokens == 4
        assert isinstance(rest[-1], Finish) and rest[-1].usage.completion_tokens == 40


async def test_a_queued_request_whose_client_left_is_never_decoded() -> None:
    async with engine_with(parallel=1) as engine:
        running = engine.generate(chat(QUESTIONS[1], max_tokens=30, logit_bias=KEEP_TALKING))
        async with contextlib.aclosing(running):
            await running.__anext__()
            queued = asyncio.ensure_future(collect(engine, chat(QUESTIONS[0], max_tokens=30)))
            while engine.waiting < 1:
                await asyncio.sleep(0.001)
            queued.cancel()
            rest = [event async for event in running]
        before = engine.decoded_tokens
        await collect(engine, chat(QUESTIONS[2], max_tokens=5))
    assert isinstance(rest[-1], Finish) and rest[-1].usage.completion_tokens == 30
    assert engine.decoded_tokens - before == 5


async def test_a_long_prompt_is_read_in_chunks_while_another_stream_moves() -> None:
    long_prompt = "Here is a list of fruits: " + ", ".join(["apple", "pear", "plum", "fig"] * 150) + ". Summarize."
    async with engine_with(parallel=2, prefill_chunk=64, n_ctx=2048) as engine:
        order: list[str] = []

        async def stream(name: str, request: ChatRequest) -> None:
            async for event in engine.generate(request):
                if isinstance(event, TextDelta):
                    order.append(name)

        streaming = asyncio.ensure_future(stream("short", chat(QUESTIONS[1], max_tokens=200, logit_bias=KEEP_TALKING)))
        while not order:
            await asyncio.sleep(0.001)
        await stream("long", chat(long_prompt, max_tokens=4))
        await streaming
    first_long = order.index("long")
    assert order[:first_long].count("short") >= 1 + 1200 // 64 // 2  # at least one token per couple of chunks


async def test_a_prompt_held_by_a_busy_sequence_is_copied_not_read_again() -> None:
    """The prompt is read once alone (which fixes its cache's last digits), then runs again on
    its own sequence, kept busy. The same prompt meanwhile takes the other sequence, copies the
    busy one's cache instead of reading the prompt, and decodes what the busy one decoded."""
    question = (Message("user", "Tell me about the history of lighthouses and the people who kept them."),)
    async with engine_with(parallel=2) as engine:
        _, first = await collect(engine, chat(question, max_tokens=1))
        busy = engine.generate(chat(question, max_tokens=60, logit_bias=KEEP_TALKING))
        async with contextlib.aclosing(busy):
            events = [await busy.__anext__()]
            texts, copied = await collect(engine, chat(question, max_tokens=12, logit_bias=KEEP_TALKING))
            events += [event async for event in busy]
    prompt_tokens = first[0].usage.prompt_tokens
    assert copied[0].usage.cached_tokens == prompt_tokens - 1  # the other sequence was empty
    busy_text = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert texts[0] and busy_text.startswith(texts[0])


async def conversation_turns(engine: LlamaCppEngine, between: str | None) -> tuple[Finish, Finish, str]:
    """A conversation's two turns on a one-sequence engine, with another one's turn `between`
    them if given: the first turn's usage, the second's, and the second's text."""
    first = (Message("user", "Describe the life of a lighthouse keeper on a remote island in the north."),)
    texts, (one,) = await collect(engine, chat(first, max_tokens=24))
    if between is not None:
        await collect(engine, chat(between, max_tokens=24))
    second = (*first, Message("assistant", texts[0]), Message("user", "What did the keeper eat?"))
    texts, (two,) = await collect(engine, chat(second, max_tokens=24))
    return one, two, texts[0]


async def test_a_conversation_whose_sequence_was_taken_meanwhile_is_restored_not_read_again() -> None:
    async with engine_with(parallel=1) as engine:
        _, _, undisturbed = await conversation_turns(engine, None)
    async with engine_with(parallel=1) as engine:
        one, two, restored = await conversation_turns(engine, QUESTIONS[2])
        kept = engine.describe()["prompt_cache"]
    assert two.usage.cached_tokens >= one.usage.prompt_tokens - 1  # the whole first turn, at least
    assert restored == undisturbed  # the very cache the first turn left
    assert kept["prompts"] >= 1 and 0 < kept["bytes"] <= kept["budget"] == 256 * 1024 * 1024
    async with engine_with(parallel=1, prompt_cache_mib=0) as engine:
        one, two, _ = await conversation_turns(engine, QUESTIONS[2])
        assert "prompt_cache" not in engine.describe()
    assert two.usage.cached_tokens < one.usage.prompt_tokens - 1  # the system prompt it shares with the other
