"""Forced tool calls with the real model and the official clients: a call always comes, and its
arguments always parse and match the tool's schema. `tool_choice: none` never yields one."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import jsonschema
import openai
import pytest

MODEL = "SmolLM2-135M-Instruct"
WEATHER_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 24}, "unit": {"enum": ["celsius", "fahrenheit"]}},
    "required": ["city", "unit"],
}
TIME_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {"timezone": {"type": "string", "maxLength": 24}},
    "required": ["timezone"],
}
OPENAI_TOOLS: Any = [
    {
        "type": "function",
        "function": {"name": "get_weather", "description": "Weather in a city", "parameters": WEATHER_PARAMETERS},
    },
    {
        "type": "function",
        "function": {"name": "get_time", "description": "Time in a timezone", "parameters": TIME_PARAMETERS},
    },
]
ASK: Any = [{"role": "user", "content": "What is the weather in Paris?"}]
SCHEMAS = {"get_weather": WEATHER_PARAMETERS, "get_time": TIME_PARAMETERS}
LIMIT = 64


def _check(name: str, arguments: str | dict[str, Any]) -> dict[str, Any]:
    parsed = json.loads(arguments) if isinstance(arguments, str) else arguments
    jsonschema.validate(parsed, SCHEMAS[name])
    return parsed


def test_chat_required_makes_one_valid_call(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(
        model=MODEL,
        messages=ASK,
        tools=OPENAI_TOOLS,
        tool_choice="required",
        parallel_tool_calls=False,
        max_tokens=LIMIT,
        temperature=0,
    )
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls"
    calls = choice.message.tool_calls or []
    assert len(calls) == 1 and calls[0].id.startswith("call_")
    function = calls[0].function  # type: ignore[union-attr]
    _check(function.name, function.arguments)


def test_chat_named_tool_streamed(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model=MODEL,
        messages=ASK,
        tools=OPENAI_TOOLS,
        tool_choice={"type": "function", "function": {"name": "get_time"}},
        max_tokens=LIMIT,
        temperature=0,
        stream=True,
    )
    names, arguments, reasons = [], "", []
    for chunk in stream:
        choice = chunk.choices[0]
        for call in choice.delta.tool_calls or ():
            assert call.index == 0
            if call.function and call.function.name:
                names.append(call.function.name)
            arguments += (call.function.arguments or "") if call.function else ""
        if choice.finish_reason:
            reasons.append(choice.finish_reason)
    assert names == ["get_time"] and reasons == ["tool_calls"]
    _check("get_time", arguments)


def test_chat_tool_choice_none_never_calls(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(
        model=MODEL, messages=ASK, tools=OPENAI_TOOLS, tool_choice="none", max_tokens=16, temperature=0
    )
    choice = reply.choices[0]
    assert not choice.message.tool_calls and choice.finish_reason in ("stop", "length")


def test_chat_tool_schema_decoding_cannot_enforce_is_400(client: openai.OpenAI) -> None:
    tool: Any = {
        "type": "function",
        "function": {
            "name": "count",
            "parameters": {"type": "object", "properties": {"n": {"type": "array", "uniqueItems": True}}},
        },
    }
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model=MODEL, messages=ASK, tools=[tool], tool_choice="required", max_tokens=LIMIT
        )
    assert caught.value.param == "tools[0]" and "uniqueItems" in caught.value.message


def test_responses_required(client: openai.OpenAI) -> None:
    tools: Any = [
        {"type": "function", "name": t["function"]["name"], "parameters": t["function"]["parameters"]}
        for t in OPENAI_TOOLS
    ]
    response = client.responses.create(
        model=MODEL,
        input=ASK[0]["content"],
        tools=tools,
        tool_choice="required",
        parallel_tool_calls=False,
        max_output_tokens=LIMIT,
        temperature=0,
    )
    calls = [item for item in response.output if item.type == "function_call"]
    assert response.status == "completed" and len(calls) == 1
    _check(calls[0].name, calls[0].arguments)


@pytest.fixture(scope="module")
def claude(server) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=60) as sdk:
        yield sdk


ANTHROPIC_TOOLS: Any = [
    {
        "name": t["function"]["name"],
        "description": t["function"]["description"],
        "input_schema": t["function"]["parameters"],
    }
    for t in OPENAI_TOOLS
]


def test_anthropic_tool_choice_any(claude: anthropic.Anthropic) -> None:
    reply = claude.messages.create(
        model=MODEL,
        max_tokens=LIMIT,
        messages=ASK,
        tools=ANTHROPIC_TOOLS,
        tool_choice={"type": "any", "disable_parallel_tool_use": True},
        extra_body={"temperature": 0},
    )
    assert reply.stop_reason == "tool_use"
    uses = [block for block in reply.content if block.type == "tool_use"]
    assert len(uses) == 1
    _check(uses[0].name, uses[0].input)  # type: ignore[arg-type]


def test_anthropic_named_tool_streamed(claude: anthropic.Anthropic) -> None:
    with claude.messages.stream(
        model=MODEL,
        max_tokens=LIMIT,
        messages=ASK,
        tools=ANTHROPIC_TOOLS,
        tool_choice={"type": "tool", "name": "get_weather"},
        extra_body={"temperature": 0},
    ) as stream:
        deltas = [e for e in stream if e.type == "content_block_delta" and e.delta.type == "input_json_delta"]
        final = stream.get_final_message()
    assert deltas and final.stop_reason == "tool_use"
    (use,) = [block for block in final.content if block.type == "tool_use"]
    assert use.name == "get_weather"
    _check("get_weather", use.input)  # type: ignore[arg-type]
