"""Bad requests fail in `parse`, as `InvalidRequest` naming the offending `param`."""

from __future__ import annotations

from typing import Any

import pytest

from asgi_llm.adapters.openai import (
    chat as openai_chat,
)
from asgi_llm.adapters.openai import (
    completions as openai_completions,
)
from asgi_llm.adapters.openai import (
    embeddings as openai_embeddings,
)
from asgi_llm.core import InvalidRequest, Unsupported

USER = [{"role": "user", "content": "hi"}]


def chat(**fields: Any) -> dict[str, Any]:
    return {"model": "m", "messages": USER, **fields}


def completion(**fields: Any) -> dict[str, Any]:
    return {"model": "m", "prompt": "Once", **fields}


def embedding(**fields: Any) -> dict[str, Any]:
    return {"model": "m", "input": "hello", **fields}


INVALID = [
    # chat: wrong types and ranges
    pytest.param(openai_chat, chat(temperature="hot"), "temperature", id="chat-temperature-str"),
    pytest.param(openai_chat, chat(temperature=2.5), "temperature", id="chat-temperature-range"),
    pytest.param(openai_chat, chat(messages="hi"), "messages", id="chat-messages-not-list"),
    pytest.param(openai_chat, chat(messages=[]), "messages", id="chat-messages-empty"),
    pytest.param(openai_chat, chat(max_tokens=-1), "max_tokens", id="chat-max-tokens-negative"),
    pytest.param(openai_chat, chat(n="2"), "n", id="chat-n-str"),
    pytest.param(openai_chat, chat(stop=[1]), "stop", id="chat-stop-int"),
    pytest.param(
        openai_chat,
        chat(stream_options={"include_usage": "yes"}),
        "stream_options.include_usage",
        id="chat-stream-options",
    ),
    pytest.param(openai_chat, chat(messages=[{"role": "bot", "content": "x"}]), "messages[0].role", id="chat-role"),
    pytest.param(
        openai_chat,
        chat(messages=[*USER, {"role": "user", "content": 5}]),
        "messages[1].content",
        id="chat-content-int",
    ),
    # chat: missing fields
    pytest.param(openai_chat, {"messages": USER}, "model", id="chat-missing-model"),
    pytest.param(openai_chat, {"model": "m"}, "messages", id="chat-missing-messages"),
    # chat: cross-field rules
    pytest.param(openai_chat, chat(top_logprobs=2), "top_logprobs", id="chat-top-logprobs-without-logprobs"),
    pytest.param(
        openai_chat, chat(logprobs=False, top_logprobs=2), "top_logprobs", id="chat-top-logprobs-logprobs-false"
    ),
    pytest.param(openai_chat, chat(logit_bias={"hello": 1}), "logit_bias", id="chat-logit-bias-key"),
    # completions
    pytest.param(openai_completions, {"model": "m"}, "prompt", id="completions-missing-prompt"),
    pytest.param(openai_completions, completion(prompt=[]), "prompt", id="completions-empty-prompt"),
    pytest.param(openai_completions, completion(logprobs=6), "logprobs", id="completions-logprobs-range"),
    pytest.param(openai_completions, completion(max_tokens=0), "max_tokens", id="completions-max-tokens-zero"),
    pytest.param(openai_completions, completion(logit_bias={"-1": 1}), "logit_bias", id="completions-logit-bias-key"),
    # embeddings
    pytest.param(openai_embeddings, embedding(input=[]), "input", id="embeddings-empty-list"),
    pytest.param(openai_embeddings, embedding(input=""), "input[0]", id="embeddings-empty-string"),
    pytest.param(openai_embeddings, embedding(input=["a", ""]), "input[1]", id="embeddings-empty-second"),
    pytest.param(openai_embeddings, embedding(encoding_format="int8"), "encoding_format", id="embeddings-format"),
    pytest.param(openai_embeddings, embedding(dimensions=0), "dimensions", id="embeddings-dimensions-zero"),
    pytest.param(openai_embeddings, embedding(dimensions="256"), "dimensions", id="embeddings-dimensions-str"),
    pytest.param(openai_embeddings, {"input": "x"}, "model", id="embeddings-missing-model"),
]

UNSUPPORTED = [
    pytest.param(
        openai_chat,
        chat(messages=[{"role": "system", "content": [{"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}]),
        "messages[0].content[0].type",
        id="chat-image-part-not-user",
    ),
    pytest.param(
        openai_chat,
        chat(messages=[*USER, {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "input_audio"}]}]),
        "messages[1].content[1].type",
        id="chat-audio-second-part",
    ),
    pytest.param(openai_chat, chat(modalities=["text", "audio"]), "modalities", id="chat-audio-out"),
    pytest.param(openai_completions, completion(suffix="end"), "suffix", id="completions-suffix"),
    pytest.param(openai_completions, completion(n=1, best_of=3), "best_of", id="completions-best-of"),
]


@pytest.mark.parametrize(("adapter", "body", "param"), INVALID)
def test_invalid_request_names_param(adapter: Any, body: Any, param: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        adapter.parse(body)
    assert caught.value.param == param
    assert caught.value.status == 400
    assert caught.value.message


@pytest.mark.parametrize(("adapter", "body", "param"), UNSUPPORTED)
def test_unsupported_names_param(adapter: Any, body: Any, param: str) -> None:
    with pytest.raises(Unsupported) as caught:
        adapter.parse(body)
    assert caught.value.param == param
    assert caught.value.status == 400


@pytest.mark.parametrize("body", [None, [], "text", 3])
def test_body_not_an_object(body: Any) -> None:
    with pytest.raises(InvalidRequest) as caught:
        openai_chat.parse(body)
    assert caught.value.param is None


def test_missing_param_message_names_it() -> None:
    with pytest.raises(InvalidRequest, match="Missing required parameter: 'messages'"):
        openai_chat.parse({"model": "m"})


@pytest.mark.parametrize(
    "fields",
    [
        {"response_format": {"type": "text"}},
        {"tool_choice": "none"},
        {"tools": []},
        {"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]},
        {"modalities": ["text"]},
        {"logprobs": True, "top_logprobs": 0},
        {"vendor_extra": None},
    ],
)
def test_harmless_options_are_accepted(fields: dict[str, Any]) -> None:
    """The refusals above are specific: the harmless form of each option parses."""
    assert openai_chat.parse(chat(**fields)).request.model == "m"


def test_chat_tools_reach_the_core() -> None:
    tools = [
        {"type": "function", "function": {"name": "get_weather", "description": "d", "parameters": {"type": "object"}}}
    ]
    parsed = openai_chat.parse(
        chat(
            tools=tools,
            tool_choice={"type": "function", "function": {"name": "get_weather"}},
            parallel_tool_calls=False,
        )
    )
    request = parsed.request
    assert [t.name for t in request.tools] == ["get_weather"]
    assert request.tools[0].parameters == {"type": "object"} and request.tools[0].description == "d"
    assert request.tool_choice == "get_weather" and request.parallel_tool_calls is False


TOOL_MISTAKES = [
    pytest.param(openai_chat, chat(tools=[{"type": "web_search"}]), "tools[0].type", id="chat-tools-kind"),
    pytest.param(openai_chat, chat(tool_choice="required"), "tool_choice", id="chat-required-without-tools"),
    pytest.param(
        openai_chat,
        chat(
            tools=[{"type": "function", "function": {"name": "f"}}],
            tool_choice={"type": "function", "function": {"name": "g"}},
        ),
        "tool_choice",
        id="chat-tool-choice-unknown-name",
    ),
]


@pytest.mark.parametrize(("adapter", "body", "param"), TOOL_MISTAKES)
def test_tool_mistakes_name_the_param(adapter: Any, body: Any, param: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        adapter.parse(body)
    assert caught.value.param == param and caught.value.status == 400
