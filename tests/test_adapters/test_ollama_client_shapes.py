"""Shapes real Ollama clients send, honoured: a call sent back with its `id` and indexes (Open
WebUI; Ollama 0.12.10 on returns them), `think: false` with a raw prompt, and the served
context in `/api/show`'s parameters, which clients size `options.num_ctx` by."""

from __future__ import annotations

from typing import Any

import pytest

from asgi_llm.adapters.ollama import chat as ollama_chat
from asgi_llm.adapters.ollama import generate as ollama_generate
from asgi_llm.adapters.ollama import models as ollama_models
from asgi_llm.core import CompletionRequest, InvalidRequest, ModelCard, ModelFacts, Unsupported

USER = {"role": "user", "content": "Weather in Paris and Rome?"}
CALL = {"name": "get_weather", "arguments": {"city": "Paris"}}


def turns(*calls: dict[str, Any], answer: dict[str, Any]) -> list[dict[str, Any]]:
    assistant = {"role": "assistant", "content": "", "tool_calls": list(calls)}
    return [USER, assistant, {"role": "tool", "content": "18C", **answer}]


def test_a_calls_id_is_its_id_and_a_tool_result_names_it() -> None:
    first = {"index": 0, "id": "call_abc", "type": "function", "function": {**CALL, "index": 0}}
    second = {"id": "call_def", "function": {"name": "get_weather", "arguments": {"city": "Rome"}, "index": 1}}
    messages = ollama_chat.parse({"model": "m", "messages": turns(first, second, answer={"tool_call_id": "call_def"})})
    assistant, tool = messages.request.messages[1:]
    assert [call.id for call in assistant.tool_calls] == ["call_abc", "call_def"]
    assert tool.tool_call_id == "call_def"


def test_a_call_without_an_id_is_given_one_and_a_result_by_tool_name_finds_it() -> None:
    with_id = ollama_chat.parse({"model": "m", "messages": turns({"id": "c1", "function": CALL}, answer={})})
    assert with_id.request.messages[2].tool_call_id == "c1"  # the earliest unanswered call, by its own id
    bare = ollama_chat.parse({"model": "m", "messages": turns({"function": CALL}, answer={})})
    assert bare.request.messages[2].tool_call_id == bare.request.messages[1].tool_calls[0].id == "call_1_0"


@pytest.mark.parametrize(
    ("call", "param"),
    [
        ({"type": "custom", "function": CALL}, "messages[1].tool_calls[0].type"),
        ({"id": "", "function": CALL}, "messages[1].tool_calls[0].id"),
        ({"function": {**CALL, "extra": 1}}, "messages[1].tool_calls[0].function.extra"),
    ],
)
def test_a_call_of_another_type_or_an_unknown_key_is_still_refused(call: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        ollama_chat.parse({"model": "m", "messages": turns(call, answer={})})
    assert caught.value.param == param


def test_a_raw_prompt_takes_think_false_and_refuses_think_true() -> None:
    raw = ollama_generate.parse({"model": "m", "prompt": "<|im_start|>user\nhi", "raw": True, "think": False})
    assert isinstance(raw.request, CompletionRequest)
    for think in (True, "high"):
        with pytest.raises(Unsupported) as caught:
            ollama_generate.parse({"model": "m", "prompt": "x", "raw": True, "think": think})
        assert caught.value.param == "think"


def card(context_length: int) -> ModelCard:
    facts = ModelFacts(architecture="llama", metadata={"general.architecture": "llama", "llama.context_length": 8192})
    return ModelCard("m", 0, "asgi-llm", (), "ready", context_length, False, facts=facts)


def test_show_gives_the_served_context_as_num_ctx_and_the_trained_one_in_model_info() -> None:
    _, shown = ollama_models.show([card(4096)], {"model": "m"})
    assert shown["parameters"].split() == ["num_ctx", "4096"]
    assert shown["model_info"]["llama.context_length"] == 8192  # as the GGUF says
    _, trained = ollama_models.show([card(0)], {"model": "m"})  # n_ctx 0: served with the trained context
    assert trained["parameters"] == ""
