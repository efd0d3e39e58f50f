"""A prompt over the context is refused naming the field it came from in the client's protocol
(`messages`, Responses' `input`, `prompt`); one that fits, but not with the output asked for,
names the field that asked for that output."""

from __future__ import annotations

from typing import ClassVar

import pytest

from asgi_llm import ModelConfig
from asgi_llm.core import ChatRequest, CompletionRequest, ContextOverflow, GenerationRequest, Message, SamplingParams
from asgi_llm.engines.llamacpp.prompts import Prompts


class FakeModel:
    """What `Prompts` reads of a model: its special tokens' text, and a tokenizer for the reasoning marker."""

    metadata: ClassVar[dict[str, object]] = {}
    bos, eos = 1, 2

    def token_text(self, token: int) -> str:
        return {1: "<s>", 2: "</s>"}[token]

    def tokenize(self, text: str, *, add_bos: bool) -> list[int]:
        return [5, 6]


def _prompts() -> Prompts:
    template = "{% for m in messages %}{{ m.content }}{% endfor %}"
    return Prompts(FakeModel(), ModelConfig(chat_template=template), context_length=100)  # type: ignore[arg-type]


def _chat(prompt_param: str, max_tokens: int | None) -> ChatRequest:
    sampling = SamplingParams(max_tokens=max_tokens, max_tokens_param="max_output_tokens")
    return ChatRequest(model="m", messages=(Message("user", "hi"),), sampling=sampling, prompt_param=prompt_param)


@pytest.mark.parametrize(
    ("request_", "tokens", "param"),
    [
        pytest.param(_chat("messages", None), 100, "messages", id="chat-prompt"),
        pytest.param(_chat("input", 4), 100, "input", id="responses-prompt"),
        pytest.param(_chat("input", 10), 95, "max_output_tokens", id="responses-budget"),
        pytest.param(CompletionRequest(model="m", prompts=("x",)), 100, "prompt", id="completion-prompt"),
    ],
)
def test_an_overflow_names_the_field_that_overflows(request_: GenerationRequest, tokens: int, param: str) -> None:
    with pytest.raises(ContextOverflow) as caught:
        _prompts().check_fits([7] * tokens, request_)
    assert caught.value.param == param


def test_a_prompt_that_fits_with_its_output_passes() -> None:
    _prompts().check_fits([7] * 90, _chat("input", 10))
