"""`kv_unified` with the real model: one KV buffer shared by every sequence (a copy between
sequences shares cells instead of copying a stream) gives, token for token, what separate
streams give: greedy choices decoded together, n > 1 from one prompt reading, a prompt copied
from a busy sequence that holds more of it, and conversations restored from the prompt cache
when there are more of them than sequences."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import llama_cpp
import pytest

from asgi_llm import ModelConfig
from asgi_llm.core import ChatRequest, CompletionRequest, Finish, Message, SamplingParams, TextDelta
from asgi_llm.core.requests import GenerationRequest
from asgi_llm.engines.llamacpp import LlamaCppEngine

from .local_engine import local_engine

pytestmark = [pytest.mark.anyio, pytest.mark.model]
KEEP_TALKING = ((0, -100.0), (2, -100.0))  # tokens 0 and 2 end SmolLM2's turn
PARALLEL = 2
N_CTX = 512


def chat(messages: tuple[Message, ...], max_tokens: int = 5, n: int = 1) -> ChatRequest:
    sampling = SamplingParams(max_tokens=max_tokens, temperature=0, logit_bias=KEEP_TALKING)
    return ChatRequest(model="m", messages=messages, sampling=sampling, n=n)


def user(text: str) -> tuple[Message, ...]:
    return (Message("user", text),)


async def collect(engine: LlamaCppEngine, request: GenerationRequest) -> tuple[list[str], list[tuple[int, int]]]:
    """Each choice's text and its (prompt tokens, cached prompt tokens), by choice index."""
    texts: dict[int, str] = {}
    usage: dict[int, tuple[int, int]] = {}
    async for event in engine.generate(request):
        if isinstance(event, TextDelta):
            texts[event.index] = texts.get(event.index, "") + event.text
        elif isinstance(event, Finish):
            usage[event.index] = (event.usage.prompt_tokens, event.usage.cached_tokens)
    return [texts[i] for i in sorted(usage)], [usage[i] for i in sorted(usage)]


async def copied_from_a_busy_sequence(engine: LlamaCppEngine) -> dict[str, Any]:
    """A prompt read once, then held by a busy sequence: the same prompt on the other sequence
    starts from a copy of the busy one's cache rather than reading it again."""
    held = user("Tell me about the history of lighthouses and the people who kept them.")
    await collect(engine, chat(held, max_tokens=1))
    busy = engine.generate(chat(held, max_tokens=12))
    async with contextlib.aclosing(busy):
        await busy.__anext__()
        copied = await collect(engine, chat(held, max_tokens=4))
        rest = "".join(e.text for e in [event async for event in busy] if isinstance(e, TextDelta))
    return {"copied": copied, "busy_tail": rest}


async def conversations(engine: LlamaCppEngine) -> dict[str, Any]:
    """Three conversations, one turn each, then a second turn each: more conversations than
    sequences, so second turns restore their first turn's cache from the prompt cache."""
    topics = ("a lighthouse keeper", "a beekeeper", "a glassblower")
    firsts = [user(f"Describe the working day of {topic} on a remote island.") for topic in topics]
    turns = [await collect(engine, chat(first)) for first in firsts]
    seconds = [
        (*first, Message("assistant", texts[0]), Message("user", "What did they eat?"))
        for first, (texts, _) in zip(firsts, turns)
    ]
    again = [await collect(engine, chat(second)) for second in seconds]
    return {"first": turns, "second": again}


async def scenario(kv_unified: bool) -> dict[str, Any]:
    config = ModelConfig(n_ctx=N_CTX, parallel=PARALLEL, n_threads=1, kv_unified=kv_unified, adapt_threads=False)
    async with local_engine(config) as engine:
        assert engine.runtime is not None
        seen: dict[str, Any] = {
            "n_ctx_seq": llama_cpp.llama_n_ctx_seq(engine.runtime.decoder.context.ctx),
            "context_length": engine.context_length,
        }
        questions = [user(q) for q in ("What is the capital of France?", "Count from 1 to 10.")]
        for question in questions:  # each prompt read alone first, then decoded together
            await collect(engine, chat(question, max_tokens=1))
        seen["together"] = await asyncio.gather(*(collect(engine, chat(q)) for q in questions))
        seen["n"] = await collect(engine, chat(user("Write a haiku about the sea."), n=PARALLEL))
        seen.update(await copied_from_a_busy_sequence(engine))
        seen.update(await conversations(engine))
        seen["prompt_cache"] = engine.describe()["prompt_cache"]["prompts"]
    return seen


async def test_unified_kv_gives_what_separate_streams_give_token_for_token() -> None:
    separate = await scenario(kv_unified=False)
    unified = await scenario(kv_unified=True)
    # the option reached llama.cpp: one buffer of every sequence's positions, each sequence its share
    assert (separate["n_ctx_seq"], unified["n_ctx_seq"]) == (N_CTX, N_CTX * PARALLEL)
    assert separate["context_length"] == unified["context_length"] == N_CTX
    texts, usage = unified["n"]  # one reading, copied to the other choices
    assert len(texts) == PARALLEL and len(set(texts)) == 1 and [u[0] > 0 for u in usage] == [True, False]
    texts, [(prompt, cached)] = unified["copied"]
    assert texts[0] and cached == prompt - 1  # copied from the busy sequence, not read again
    assert unified["busy_tail"]  # and the busy one went on, its own cells untouched
    # three conversations on two sequences: each second turn finds its whole first turn, kept or
    # (for one at least) restored from the prompt cache
    for (_, [(prompt, _)]), (_, [(_, cached)]) in zip(unified["first"], unified["second"]):
        assert cached >= prompt - 1
    assert unified["prompt_cache"] >= 1
    assert {k: v for k, v in unified.items() if k != "n_ctx_seq"} == {
        k: v for k, v in separate.items() if k != "n_ctx_seq"
    }


async def test_llama_cpps_most_sequences_load_and_each_keeps_to_its_share_of_one_buffer() -> None:
    """256 sequences (llama.cpp's limit) of 16 positions in one unified buffer of 4096: small
    enough for a test, where separate streams would pad each to 256 positions."""
    config = ModelConfig(n_ctx=16, parallel=256, n_threads=1, kv_unified=True, adapt_threads=False)
    async with local_engine(config) as engine:
        assert engine.runtime is not None
        assert llama_cpp.llama_n_seq_max(engine.runtime.decoder.context.ctx) == 256
        assert engine.context_length == 16  # not the buffer's 4096
        sampling = SamplingParams(max_tokens=3, temperature=0, logit_bias=KEEP_TALKING)
        request = CompletionRequest(model="m", prompts=("The sky is",), sampling=sampling, n=4)
        texts, _ = await collect(engine, request)
    assert len(texts) == 4 and len(set(texts)) == 1 and texts[0]
