"""Reasoning blocks with the real model: split only for models that have them; stops and logprobs
apply to the answer. SmolLM2 has no `<think>`, so the engine is told it has for the split cases."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from asgi_llm import ModelConfig
from asgi_llm.core import (
    ChatRequest,
    CompletionRequest,
    Finish,
    Message,
    PromptRead,
    ReasoningDelta,
    SamplingParams,
    TextDelta,
)

from .local_engine import local_engine

pytestmark = pytest.mark.anyio
FEW_SHOT = (
    "Q: What is 1+1?\n<think>One plus one is two.</think>\nA: 2\n"
    "Q: What is 2+3?\n<think>Two plus three is five.</think>\nA: 5\n"
    "Q: What is 3+4?\n<think>"
)



def completion(prompt: str, **sampling: object) -> CompletionRequest:
    return CompletionRequest(model="m", prompts=(prompt,), sampling=SamplingParams(temperature=0, **sampling))  # type: ignore[arg-type]


async def generation(engine: Any, request: Any) -> AsyncIterator[Any]:
    """The generation's events; the prompt read the engine tells first is checked and left out."""
    events = engine.generate(request)
    read = await events.__anext__()
    assert isinstance(read, PromptRead) and read.tokens > 0
    async for event in events:
        yield event


async def test_reasoning_blocks_are_split_only_for_models_that_have_them() -> None:
    async with local_engine(ModelConfig(n_ctx=512)) as engine:
        assert not engine._thinks  # SmolLM2: neither its template nor its vocabulary has `<think>`
        chat = ChatRequest(
            model="m", messages=(Message("user", "Hi"),), sampling=SamplingParams(max_tokens=16, temperature=0)
        )
        assert not [e async for e in generation(engine, chat) if isinstance(e, ReasoningDelta)]
        plain = [e async for e in generation(engine, completion(FEW_SHOT, max_tokens=20))]
        text = "".join(e.text for e in plain if isinstance(e, TextDelta))
        assert "</think>" in text  # the prompt opened a block; this model closes it and answers

        engine._thinks = True
        split = [e async for e in generation(engine, completion(FEW_SHOT, max_tokens=20, logprobs=True))]
        reasoning = "".join(e.text for e in split if isinstance(e, ReasoningDelta))
        answer = "".join(e.text for e in split if isinstance(e, TextDelta))
        thought, _, rest = text.partition("</think>")
        assert (reasoning, answer) == (thought.strip(), rest.lstrip())
        assert split.index(next(e for e in split if isinstance(e, TextDelta))) > 0  # reasoning came first
        logprobs = [lp for e in split if isinstance(e, TextDelta) for lp in e.logprobs]
        assert "".join(lp.token for lp in logprobs) == answer  # only the answer's tokens have logprobs
        done, before = split[-1], plain[-1]
        assert isinstance(done, Finish) and isinstance(before, Finish)
        assert (done.reason, done.usage.completion_tokens) == (before.reason, before.usage.completion_tokens)
        assert 0 < done.usage.reasoning_tokens < done.usage.completion_tokens and before.usage.reasoning_tokens == 0

        stopped = [e async for e in generation(engine, completion(FEW_SHOT, max_tokens=20, stop=("\n", " plus")))]
        assert "".join(e.text for e in stopped if isinstance(e, ReasoningDelta)) == reasoning  # " plus" is in it
        assert "".join(e.text for e in stopped if isinstance(e, TextDelta)) == answer.split("\n")[0]
        finish = stopped[-1]
        assert isinstance(finish, Finish) and finish.reason == "stop" and finish.stop_sequence == "\n"

        unclosed = [e async for e in generation(engine, completion(FEW_SHOT, max_tokens=3))]
        assert all(isinstance(e, ReasoningDelta) for e in unclosed[:-1]) and len(unclosed) > 1
        assert isinstance(unclosed[-1], Finish) and unclosed[-1].reason == "length"
        assert unclosed[-1].usage.reasoning_tokens == unclosed[-1].usage.completion_tokens == 3  # all of it thought
