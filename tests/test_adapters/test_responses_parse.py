"""Responses requests: bad ones fail in `parse` naming the `param`; good item lists become core messages."""

from __future__ import annotations

from typing import Any

import pytest

from asgi_llm.adapters.openai.responses import routes as openai_responses
from asgi_llm.core import InvalidRequest, Message, ToolCall, ToolSpec, Unsupported

FUNCTION = {"type": "function", "name": "f", "parameters": {"type": "object"}}
CALL = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}
LOGPROBS = "message.output_text.logprobs"


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
    pytest.param(body(include=[LOGPROBS, "no.such.thing"]), "include[1]", id="include-unknown"),
    pytest.param(body(prompt_cache_key=5), "prompt_cache_key", id="prompt-cache-key-int"),
    pytest.param(
        body(stream_options={"include_obfuscation": 0}), "stream_options.include_obfuscation", id="obfuscation-int"
    ),
    pytest.param(
        body(stream_options={"include_obfuscation": "false"}),
        "stream_options.include_obfuscation",
        id="obfuscation-str",
    ),
    pytest.param(body(stream_options=5), "stream_options", id="stream-options-int"),
    pytest.param(body(tool_choice="required"), "tool_choice", id="tool-choice-required-without-tools"),
    pytest.param(body(tool_choice={"type": "function", "name": "f"}), "tool_choice", id="tool-choice-without-tools"),
    pytest.param(body(tools=[FUNCTION, FUNCTION]), "tools[1].name", id="tool-name-twice"),
    pytest.param(body(tools=[{**FUNCTION, "name": ""}]), "tools[0].name", id="tool-name-empty"),
    pytest.param(body(tools=[FUNCTION, {**FUNCTION, "name": "get weather"}]), "tools[1].name", id="tool-name-space"),
    pytest.param(body(tools=[{**FUNCTION, "name": "f" * 65}]), "tools[0].name", id="tool-name-long"),
    pytest.param(
        body(text={"format": {"type": "json_schema", "name": "a.b", "schema": {"type": "object"}}}),
        "text.format.name",
        id="text-format-name-dot",
    ),
    pytest.param(body(metadata={"k" * 65: "v"}), "metadata", id="metadata-key-long"),
    pytest.param(body(metadata={"k": "v" * 513}), "metadata", id="metadata-value-long"),
    pytest.param(
        items({"role": "user", "content": "a"}, {"type": "function_call_output", "call_id": "c9", "output": "1"}),
        "input[1].call_id",
        id="function-call-output-without-call",
    ),
    pytest.param(items({"role": "user", "content": "a"}, CALL), "input", id="function-call-without-output"),
    pytest.param(
        items({"role": "user", "content": [{"type": "input_text"}]}), "input[0].content[0].text", id="no-text"
    ),
    pytest.param(items(5), "input[0]", id="item-int"),
    pytest.param(body(tools=[5]), "tools[0]", id="tool-int"),
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
    pytest.param(body(conversation=""), "conversation", id="conversation-empty"),
    pytest.param(body(conversation={}), "conversation", id="conversation-empty-object"),
    pytest.param(body(prompt={"id": "pmpt_1"}), "prompt", id="prompt-template"),
    pytest.param(body(prompt={}), "prompt", id="prompt-empty-object"),
    pytest.param(body(prompt=""), "prompt", id="prompt-empty"),
    pytest.param(body(include=["message.input_image.image_url"]), "include[0]", id="include-image-url"),
    pytest.param(body(text={"verbosity": "low"}), "text.verbosity", id="text-verbosity"),
    pytest.param(body(reasoning={"effort": "high", "summary": "concise"}), "reasoning.summary", id="reasoning-summary"),
    pytest.param(
        body(stream=True, stream_options={"include_obfuscation": True}),
        "stream_options.include_obfuscation",
        id="obfuscation",
    ),
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


@pytest.mark.parametrize(
    ("request_body", "message"),
    [
        (items(5), "Invalid value for 'input[0]': expected an object."),
        (body(tools=[5]), "Invalid value for 'tools[0]': expected an object."),
        (
            items({"role": "assistant", "content": [{"type": "output_text"}]}),
            "Missing required parameter: 'input[0].content[0].text'.",
        ),
        (
            items({"type": "function_call_output", "call_id": "c9", "output": "1"}),
            "No tool call found for function call output with call_id c9.",
        ),
        (items(CALL, {**CALL, "call_id": "c2"}), "No tool output found for function call c1."),
        (body(include=["nope"]), "Invalid value for 'include[0]': 'nope'."),
    ],
)
def test_messages_say_what_is_wrong_in_wire_words(request_body: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        openai_responses.parse(request_body)
    assert caught.value.message == message


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("stream", True),
        ("max_output_tokens", 4),
        ("metadata", {"k": "v"}),
        ("include", [LOGPROBS]),
        ("top_logprobs", 2),
        ("temperature", 0.5),
        ("store", False),
        ("background", False),
        ("prompt_cache_key", "k"),
        ("stream_options", {"include_obfuscation": False}),
    ],
)
def test_count_refuses_what_only_generating_reads(field: str, value: Any) -> None:
    assert openai_responses.parse(body(**{field: value}))  # a create request takes it
    with pytest.raises(InvalidRequest) as caught:
        openai_responses.parse_count(body(**{field: value}))
    assert (caught.value.param, caught.value.status) == (field, 400)


def test_count_takes_the_fields_of_its_body() -> None:
    parsed = openai_responses.parse_count(
        body(
            instructions="i",
            tools=[FUNCTION],
            tool_choice="required",
            parallel_tool_calls=False,
            reasoning={"effort": "high"},
            text={"format": {"type": "json_object"}},
            truncation="disabled",
        )
    )
    request = parsed.request
    assert (request.tool_choice, request.parallel_tool_calls, request.messages[0]) == (
        "required",
        False,
        Message("system", "i"),
    )
    assert request.reasoning is not None and request.reasoning.enabled


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
    assert _messages(
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "Let me check."},
        CALL,
        {**CALL, "call_id": "c2"},
        {"type": "function_call_output", "call_id": "c1", "output": "1"},
        {"type": "function_call_output", "call_id": "c2", "output": "2"},
    ) == (
        Message("user", "q"),
        Message("assistant", "Let me check.", tool_calls=(ToolCall("c1", "f", "{}"), ToolCall("c2", "f", "{}"))),
        Message("tool", "1", tool_call_id="c1"),
        Message("tool", "2", tool_call_id="c2"),
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
            reasoning={"effort": "high", "summary": None},
            text={"format": {"type": "text"}, "verbosity": None},
            truncation="disabled",
            prompt_cache_key="k",
            stream_options={"include_obfuscation": False},
            conversation=None,
            prompt=None,
            metadata={"k" * 64: "v" * 512},
        )
    )
    assert isinstance(parsed.options, openai_responses.ResponsesOptions)
    assert parsed.options.echo["reasoning"] == {"effort": "high", "summary": None}
    assert parsed.options.echo["text"] == {"format": {"type": "text"}}


def test_the_prompt_is_named_input() -> None:
    """A prompt over the context is a 400 naming `input`, this protocol's field, not chat's `messages`."""
    assert openai_responses.parse(body()).request.prompt_param == "input"
    assert openai_responses.parse_count(body()).request.prompt_param == "input"


def test_a_json_schema_formats_description_is_told_to_the_model_after_the_instructions() -> None:
    fmt = {"type": "json_schema", "name": "place", "description": "A city.", "schema": {"type": "object"}}
    parsed = openai_responses.parse(body(instructions="Be brief.", text={"format": fmt}))
    system = parsed.request.messages[0]
    assert (system.role, system.content) == ("system", "Be brief.\n\nAnswer in the JSON format 'place': A city.")
    assert parsed.options.echo["instructions"] == "Be brief."  # the response object reports what was sent


@pytest.mark.parametrize("field", ["name", "description", "schema", "strict"])
def test_a_json_schemas_own_field_on_another_format_type_is_refused(field: str) -> None:
    value = {"name": "n", "description": "d", "schema": {"type": "object"}, "strict": True}[field]
    with pytest.raises(InvalidRequest) as caught:
        openai_responses.parse(body(text={"format": {"type": "json_object", field: value}}))
    assert caught.value.param == f"text.format.{field}"
