"""Reasoning blocks with the real model: split only for models that have them; stops and logprobs
apply to the answer. SmolLM2 has no `<think>`, so the engine is told it has for the split cases."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import pytest

from asgi_llm import ModelConfig
from asgi_llm.core import (
    ChatRequest,
    CompletionRequest,
    Finish,
    Message,
    PromptRead,
    Reasoning,
    ReasoningDelta,
    SamplingParams,
    TextDelta,
    Unsupported,
)

from .local_engine import local_engine

pytestmark = [pytest.mark.anyio, pytest.mark.model]
FEW_SHOT = (
    "Q: What is 1+1?\n<think>One plus one is two.</think>\nA: 2\n"
    "Q: What is 2+3?\n<think>Two plus three is five.</think>\nA: 5\n"
    "Q: What is 3+4?\n<think>"
)



def completion(prompt: str, **sampling: object) -> CompletionRequest:
    return CompletionRequest(model="m", prompts=(prompt,), sampling=SamplingParams(temperature=0, **sampling))  # type: ignore[arg-type]


def think(engine: Any) -> None:
    """Tell the engine its model writes reasoning blocks."""
    prompts = engine.runtime.prompts
    prompts.facts = replace(prompts.facts, thinks=True)


async def generation(engine: Any, request: Any) -> AsyncIterator[Any]:
    """The generation's events; the prompt read the engine tells first is checked and left out."""
    events = engine.generate(request)
    read = await events.__anext__()
    assert isinstance(read, PromptRead) and read.tokens > 0
    async for event in events:
        yield event


async def test_reasoning_blocks_are_split_only_for_models_that_have_them() -> None:
    async with local_engine(ModelConfig(n_ctx=512)) as engine:
        assert not engine.runtime.prompts.facts.thinks  # SmolLM2: neither its template nor its vocabulary has `<think>`
        chat = ChatRequest(
            model="m", messages=(Message("user", "Hi"),), sampling=SamplingParams(max_tokens=16, temperature=0)
        )
        assert not [e async for e in generation(engine, chat) if isinstance(e, ReasoningDelta)]
        plain = [e async for e in generation(engine, completion(FEW_SHOT, max_tokens=20))]
        text = "".join(e.text for e in plain if isinstance(e, TextDelta))
        assert "</think>" in text  # the prompt opened a block; this model closes it and answers

        think(engine)
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


def _chat(reasoning: Reasoning | None) -> ChatRequest:
    sampling = SamplingParams(max_tokens=8, temperature=0)
    return ChatRequest(model="m", messages=(Message("user", "Hi"),), sampling=sampling, reasoning=reasoning)


async def test_reasoning_on_is_refused_by_a_model_that_cannot_and_off_is_as_asked() -> None:
    async with local_engine(ModelConfig(n_ctx=512)) as engine:
        with pytest.raises(Unsupported) as refused:
            [e async for e in engine.generate(_chat(Reasoning(True, "reasoning_effort")))]
        assert refused.value.param == "reasoning_effort" and "does not reason" in refused.value.message
        plain = [e async for e in generation(engine, _chat(None))]
        off = [e async for e in generation(engine, _chat(Reasoning(False, "think")))]
        assert off[:-1] == plain[:-1]  # nothing to turn off: the same reply (the prompt now cached)
        assert isinstance(off[-1], Finish) and off[-1].usage.prompt_tokens == plain[-1].usage.prompt_tokens

        think(engine)  # a reasoning model whose template has no switch: an empty block closes it
        prompt = await engine._thread.call(lambda: engine.runtime.prompts.of(_chat(Reasoning(False, "think")))[0][0])
        text = engine.runtime.model.detokenize(prompt, special=True)
        assert text.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
        assert not [e async for e in generation(engine, _chat(Reasoning(False, "think"))) if isinstance(e, ReasoningDelta)]


SWITCHED = (  # a template with Qwen3's switch; it mentions <think>, so the model counts as reasoning
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "<|im_start|>assistant\n{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n{% endif %}"
)


async def test_a_template_with_its_own_switch_gets_enable_thinking() -> None:
    async with local_engine(ModelConfig(n_ctx=512, chat_template=SWITCHED, reasoning="off")) as engine:
        assert engine.runtime.prompts.facts.thinks and engine.runtime.prompts.facts.switch
        tokens = {
            label: await engine._thread.call(lambda r=request: engine.runtime.prompts.of(r)[0][0])
            for label, request in (("on", _chat(Reasoning(True, "think"))), ("default", _chat(None)))
        }
        on, default = (engine.runtime.model.detokenize(tokens[k], special=True) for k in ("on", "default"))
        assert on.endswith("<|im_start|>assistant\n")  # switched on: the template leaves the block to the model
        assert default.endswith("<think>\n\n</think>\n\n")  # the config's `reasoning = "off"`, by the template
        assert default.count("</think>") == 1  # the template's own closing, not ours as well


OPENS_A_BLOCK = (  # ChatML whose generation prompt opens a think block, as DeepSeek-R1's does
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "<|im_start|>assistant\n<think>\n"
)


async def test_a_thinking_budget_closes_the_block_when_spent() -> None:
    async with local_engine(ModelConfig(n_ctx=512, chat_template=OPENS_A_BLOCK)) as engine:
        assert engine.runtime.prompts.facts.thinks
        free = [e async for e in generation(engine, _chat_long(Reasoning(True, "thinking")))]
        budgeted = [e async for e in generation(engine, _chat_long(Reasoning(True, "thinking", budget=4)))]
        marker = len(engine.runtime.model.tokenize("</think>\n\n", add_bos=False))
        spent, unbounded = budgeted[-1], free[-1]
        assert isinstance(spent, Finish) and isinstance(unbounded, Finish)
        assert unbounded.usage.reasoning_tokens > 4 + marker  # left alone, this model thinks on
        assert 4 <= spent.usage.reasoning_tokens <= 4 + marker  # the budget, then the forced close
        thought = "".join(e.text for e in budgeted if isinstance(e, ReasoningDelta))
        answer = "".join(e.text for e in budgeted if isinstance(e, TextDelta))
        assert thought and answer and "</think>" not in answer  # it answers after the closed block


def _chat_long(reasoning: Reasoning) -> ChatRequest:
    sampling = SamplingParams(max_tokens=24, temperature=0)
    return ChatRequest(model="m", messages=(Message("user", "Why is the sky blue?"),), sampling=sampling, reasoning=reasoning)
