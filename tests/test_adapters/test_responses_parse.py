"""Responses requests: bad ones fail in `parse` naming the `param`; good item lists become core messages."""

from __future__ import annotations

from typing import Any

import pytest

from asgi_llm.adapters.openai.responses import routes as openai_responses
from asgi_llm.core import InvalidRequest, Message, ToolCall, ToolSpec, Unsupported

FUNCTION = {"type": "function", "name": "f", "parameters": {"type": "object"}}


def body(**fields: Any) -> dict[str, Any]:
    return {"model": "m", "input": "hi", **fields}


def items(*entries: Any) -> dict[str, Any]:
    return body(input=list(entries))


INVALID = [
    pytest.param({"input": "hi"}, "model", id="missing-model"),
    pytest.param({"model": "m"}, "input", id="missing-input"),
    pytest.param(body(input=5), "input", id="input-int"),
    pytest.param(body(temperature=2.5), "temperature", id="temperature-range"),
    pytest.param(body(temperature="hot"), "temperature", id="temperature-str"),
    pytest.param(body(top_p=1.5), "top_p", id="top-p-range"),
    pytest.param(body(max_output_tokens=0), "max_output_tokens", id="max-output-tokens-zero"),
    pytest.param(body(top_logprobs=21), "top_logprobs", id="top-logprobs-range"),
    pytest.param(body(metadata={"k": 1}), "metadata.k", id="metadata-value-int"),
    pytest.param(body(store="yes"), "store", id="store-str"),
    pytest.param(body(previous_response_id=7), "previous_response_id", id="previous-id-int"),
    pytest.param(items({"role": "bot", "content": "x"}), "input[0].role", id="item-role"),
    pytest.param(items({"role": "user"}), "input[0].content", id="item-missing-content"),
    pytest.param(items("hi"), "input[0]", id="item-not-object"),
    pytest.param(
        items({"role": "user", "content": "a"}, {"type": "function_call", "name": "f", "arguments": "{}"}),
        "input[1].call_id",
        id="function-call-missing-call-id",
    ),
    pytest.param(
        items({"type": "function_call_output", "call_id": "c", "output": 5}),
        "input[0].output",
        id="function-call-output-int",
    ),
    pytest.param(
        items({"type": "reasoning", "summary": [{"type": "summary_text"}]}),
        "input[0].summary[0].text",
        id="reasoning-text",
    ),
    pytest.param(body(tools=[{"type": "function"}]), "tools[0].name", id="tool-missing-name"),
    pytest.param(
        body(tools=[FUNCTION, {**FUNCTION, "parameters": "{}"}]), "tools[1].parameters", id="tool-parameters-str"
    ),
    pytest.param(body(tool_choice="sometimes"), "tool_choice", id="tool-choice-word"),
    pytest.param(
        body(tools=[FUNCTION], tool_choice={"type": "function", "name": "g"}), "tool_choice", id="tool-choice-unknown"
    ),
    pytest.param(body(text={"format": {"kind": "text"}}), "text.format.type", id="text-format-missing-type"),
    pytest.param(body(background=True, store=False), "background", id="background-unstored"),
    pytest.param(body(background="yes"), "background", id="background-not-bool"),
]

UNSUPPORTED = [
    pytest.param(
        items(
            {
                "role": "user",
                "content": [{"type": "input_text", "text": "a"}, {"type": "input_image", "file_id": "file_1"}],
            }
        ),
        "input[0].content[1].file_id",
        id="input-image-file-id",
    ),
    pytest.param(
        items({"role": "user", "content": "a"}, {"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}),
        "input[1].content[0].type",
        id="input-file",
    ),
    pytest.param(
        items({"type": "function_call_output", "call_id": "c", "output": [{"type": "input_image", "image_url": "x"}]}),
        "input[0].output[0].type",
        id="function-output-image",
    ),
    pytest.param(items({"type": "item_reference", "id": "msg_1"}), "input[0].type", id="item-reference"),
    pytest.param(items({"type": "web_search_call", "id": "ws_1"}), "input[0].type", id="foreign-item"),
    pytest.param(body(tools=[FUNCTION, {"type": "web_search"}]), "tools[1].type", id="web-search-tool"),
    pytest.param(body(tool_choice={"type": "file_search"}), "tool_choice", id="tool-choice-builtin"),
    pytest.param(body(truncation="auto"), "truncation", id="truncation-auto"),
    pytest.param(body(conversation="conv_1"), "conversation", id="conversation"),
    pytest.param(body(prompt={"id": "pmpt_1"}), "prompt", id="prompt-template"),
]


@pytest.mark.parametrize(("request_body", "param"), INVALID)
def test_invalid_request_names_the_param(request_body: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        openai_responses.parse(request_body)
    assert not isinstance(caught.value, Unsupported)
    assert caught.value.param == param
    assert caught.value.status == 400


@pytest.mark.parametrize(("request_body", "param"), UNSUPPORTED)
def test_unsupported_request_names_the_param(request_body: dict[str, Any], param: str) -> None:
    with pytest.raises(Unsupported) as caught:
        openai_responses.parse(request_body)
    assert caught.value.param == param


def test_nested_messages_name_the_full_param() -> None:
    with pytest.raises(InvalidRequest) as caught:
        openai_responses.parse(
            items({"role": "user", "content": "a"}, {"type": "function_call", "name": "f", "arguments": "{}"})
        )
    assert caught.value.message == "Missing required parameter: 'input[1].call_id'."


def test_count_needs_a_model_or_a_previous_response() -> None:
    with pytest.raises(InvalidRequest) as caught:
        openai_responses.parse_count({"input": "hi"})
    assert caught.value.param == "model"
    assert openai_responses.parse_count({"input": "hi", "previous_response_id": "resp_1"}).request.model == ""


def _messages(*entries: Any, **fields: Any) -> tuple[Message, ...]:
    return openai_responses.parse(items(*entries) | fields).request.messages


def test_reasoning_rides_on_the_next_assistant_message() -> None:
    assert _messages(
        {"role": "user", "content": "q"},
        {
            "type": "reasoning",
            "summary": [{"type": "summary_text", "text": "short"}],
            "content": [{"type": "reasoning_text", "text": "long"}],
        },
        {"role": "assistant", "content": [{"type": "output_text", "text": "a"}]},
    ) == (Message("user", "q"), Message("assistant", "a", reasoning="long"))


def test_reasoning_without_an_answer_stands_alone() -> None:
    thought = {"type": "reasoning", "summary": [{"type": "summary_text", "text": "hmm"}]}
    assert _messages({"role": "user", "content": "q"}, thought, {"role": "user", "content": "r"}) == (
        Message("user", "q"),
        Message("assistant", "", reasoning="hmm"),
        Message("user", "r"),
    )
    assert _messages({"role": "user", "content": "q"}, thought)[-1] == Message("assistant", "", reasoning="hmm")


def test_function_calls_join_the_assistant_turn_before_them() -> None:
    call = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}
    assert _messages(
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "Let me check."},
        call,
        {**call, "call_id": "c2"},
        {"type": "function_call_output", "call_id": "c1", "output": "1"},
    ) == (
        Message("user", "q"),
        Message("assistant", "Let me check.", tool_calls=(ToolCall("c1", "f", "{}"), ToolCall("c2", "f", "{}"))),
        Message("tool", "1", tool_call_id="c1"),
    )


def test_instructions_lead_and_developer_is_system() -> None:
    assert _messages({"role": "developer", "content": "d"}, {"role": "system", "content": "s"}, instructions="i") == (
        Message("system", "i"),
        Message("system", "d"),
        Message("system", "s"),
    )


def test_sampling_tools_and_options() -> None:
    parsed = openai_responses.parse(
        body(
            max_output_tokens=16,
            temperature=0,
            top_p=0.5,
            include=["message.output_text.logprobs"],
            top_logprobs=3,
            tools=[{**FUNCTION, "description": "does f"}],
            tool_choice={"type": "function", "name": "f"},
            parallel_tool_calls=False,
            stream=True,
            store=False,
            user="u",
        )
    )
    request, sampling = parsed.request, parsed.request.sampling
    assert (sampling.max_tokens, sampling.temperature, sampling.top_p) == (16, 0.0, 0.5)
    assert (sampling.logprobs, sampling.top_logprobs) == (True, 3)
    assert request.tools == (ToolSpec("f", "does f", {"type": "object"}),)
    assert (request.tool_choice, request.parallel_tool_calls, request.user) == ("f", False, "u")
    assert parsed.stream
    assert isinstance(parsed.options, openai_responses.ResponsesOptions) and not parsed.options.store
    echo = parsed.options.echo
    assert echo["tool_choice"] == {"type": "function", "name": "f"}
    assert echo["tools"] == [
        {"type": "function", "name": "f", "description": "does f", "parameters": {"type": "object"}, "strict": None}
    ]


def test_harmless_hints_are_accepted() -> None:
    parsed = openai_responses.parse(
        body(
            include=["reasoning.encrypted_content"],
            reasoning={"effort": "high", "summary": "auto"},
            text={"format": {"type": "text"}, "verbosity": "low"},
            truncation="disabled",
            prompt_cache_key="k",
            stream_options={"include_obfuscation": False},
        )
    )
    assert isinstance(parsed.options, openai_responses.ResponsesOptions)
    assert parsed.options.echo["reasoning"] == {"effort": "high", "summary": "auto"}
    assert parsed.options.echo["text"] == {"format": {"type": "text"}, "verbosity": "low"}
