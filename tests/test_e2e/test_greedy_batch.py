"""The step's one greedy pick with the real model: `Decoder.top` reads each row where llama.cpp
keeps it (a decode split into several micro-batches included), and greedy streams picked
together give exactly the tokens each gives alone, beside streams that pick their own (sampled,
held to a grammar, with logprobs)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import numpy as np
import pytest

from asgi_llm import ModelConfig
from asgi_llm.core import ChatRequest, Finish, Message, OutputFormat, SamplingParams
from asgi_llm.engines.llamacpp import native
from asgi_llm.engines.llamacpp.jobs import BatchToken
from asgi_llm.engines.llamacpp.native import Decoder, Model, new_context
from asgi_llm.engines.llamacpp.sampling import Sampling

from .local_engine import local_engine
from .test_engine_batching import QUESTIONS, collect

pytestmark = [pytest.mark.anyio, pytest.mark.model]


def test_top_reads_each_row_where_llama_cpp_keeps_it(monkeypatch: pytest.MonkeyPatch) -> None:
    together: list[int] = []
    original = native.top_rows

    def top_rows(values: np.ndarray, rows: np.ndarray) -> list[int]:
        together.append(len(rows))
        return original(values, rows)

    monkeypatch.setattr(native, "top_rows", top_rows)
    config = ModelConfig(n_ctx=64, n_batch=64, n_ubatch=8)  # the batch below is decoded 8 tokens at a time
    model = Model(config)
    decoder = Decoder(new_context(model, config, sequences=4))
    try:
        batch: list[BatchToken] = []
        rows = []
        for sequence, question in enumerate(QUESTIONS):
            prompt = model.tokenize(question, add_bos=True)
            for position, token in enumerate(prompt):
                wants = position in (1, len(prompt) - 1)
                rows += [len(batch)] if wants else []
                batch.append(BatchToken(token, position, sequence, wants))
        decoder.decode(batch)
        each = [int(np.ctypeslib.as_array(decoder.logits(row), shape=(model.n_vocab,)).argmax()) for row in rows]
        assert decoder.top(rows) == each
        assert decoder.top(rows[::-1]) == each[::-1]
        assert decoder.top(rows[1::3]) == each[1::3]
        assert decoder.top(rows[2:3]) == each[2:3]
        assert together == [len(rows), len(rows), len(rows[1::3])]  # in one pass (a single row is read alone)
    finally:
        decoder.close()
        model.close()


def chat(text: str, **sampling: object) -> ChatRequest:
    params = SamplingParams(max_tokens=24, **{"temperature": 0, **sampling})  # type: ignore[arg-type]
    return ChatRequest(model="m", messages=(Message("user", text),), sampling=params)


JSON = OutputFormat("json_object", "response_format")


def outcome(texts: dict[int, str], finishes: list[Finish]) -> tuple[str, list[tuple[str, int]]]:
    """What a stream wrote, and how and after how many tokens it ended (not how much of its
    prompt was cached, which depends on which sequence it found)."""
    return texts.get(0, ""), [(f.reason, f.usage.completion_tokens) for f in finishes]


async def test_greedy_streams_picked_together_give_the_tokens_each_gives_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each prompt is read once first (a prompt's first reading, in a long chunk, fixes its
    logits' last digits: see test_engine_batching.py); then alone, then all at once."""
    asked: list[int] = []
    original = Decoder.top

    def top(self: Decoder, rows: Sequence[int]) -> list[int]:
        asked.append(len(rows))
        return original(self, rows)

    monkeypatch.setattr(Decoder, "top", top)
    requests = [chat(question) for question in QUESTIONS] + [
        chat(QUESTIONS[0], temperature=0.8, seed=3),
        chat(QUESTIONS[1], output_format=JSON),
        chat(QUESTIONS[2], logprobs=True, top_logprobs=2),
    ]
    async with local_engine(ModelConfig(n_ctx=1024, parallel=len(requests))) as engine:
        for request in requests:
            await collect(engine, request)
        alone = [await collect(engine, request) for request in requests]
        asked.clear()
        together = await asyncio.gather(*(collect(engine, request) for request in requests))
    assert [outcome(*result) for result in together] == [outcome(*result) for result in alone]
    assert max(asked) == len(QUESTIONS)  # the plain greedy ones, in one pass; the others on their own


@pytest.mark.parametrize(
    ("sampling", "greedy"),
    [
        ({}, True),
        ({"logit_bias": ((0, -100.0),)}, False),
        ({"repeat_penalty": 1.3}, False),
        ({"temperature": 0.7}, False),
        ({"grammar": 'root ::= "yes" | "no"'}, False),
    ],
)
def test_only_plain_greedy_sampling_says_greedy(
    loaded: tuple[Model, Decoder], sampling: dict[str, object], greedy: bool
) -> None:
    model, decoder = loaded
    grammar = sampling.pop("grammar", None)
    params = SamplingParams(max_tokens=4, **{"temperature": 0, **sampling})  # type: ignore[arg-type]
    assert Sampling(model, decoder.logits, params, 0, grammar=grammar).greedy is greedy  # type: ignore[arg-type]
