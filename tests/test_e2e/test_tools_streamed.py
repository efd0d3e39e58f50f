"""A forced call's arguments stream as the real model writes them, through each official SDK's
stream helpers: more than one piece, in order, under the call's own id, and the pieces
concatenate to exactly the arguments the final events and the non-streamed reply report."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

from .tool_streams import anthropic_streamed_call

MODEL = "SmolLM2-135M-Instruct"
CITY: dict[str, Any] = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 24}},
    "required": ["city"],
    "additionalProperties": False,
}
CHAT_TOOLS: Any = [{"type": "function", "function": {"name": "get_weather", "parameters": CITY}}]
ASK: Any = [{"role": "user", "content": "What is the weather in Paris?"}]
LIMIT = 40
FORCED: Any = {"type": "function", "function": {"name": "get_weather"}}


def test_chat_arguments_stream_in_pieces_that_make_the_whole_arguments(client: openai.OpenAI) -> None:
    whole = client.chat.completions.create(
        model=MODEL, messages=ASK, tools=CHAT_TOOLS, tool_choice=FORCED, max_tokens=LIMIT, temperature=0
    )
    (expected,) = whole.choices[0].message.tool_calls or []
    with client.chat.completions.stream(
        model=MODEL, messages=ASK, tools=CHAT_TOOLS, tool_choice=FORCED, max_tokens=LIMIT, temperature=0
    ) as stream:
        events = list(stream)
        final = stream.get_final_completion()
    raw = [c for e in events if e.type == "chunk" for c in e.chunk.choices[0].delta.tool_calls or ()]
    assert raw[0].id and raw[0].id.startswith("call_") and raw[0].function and raw[0].function.name == "get_weather"
    assert all(c.index == 0 and c.id is None for c in raw[1:])
    pieces = [e.arguments_delta for e in events if e.type == "tool_calls.function.arguments.delta"]
    (done,) = [e for e in events if e.type == "tool_calls.function.arguments.done"]
    (call,) = final.choices[0].message.tool_calls or []
    assert len(pieces) > 1 and "".join(pieces) == done.arguments == call.function.arguments
    assert call.id == raw[0].id and final.choices[0].finish_reason == "tool_calls"
    assert call.function.arguments == expected.function.arguments  # type: ignore[union-attr]
    assert isinstance(json.loads(call.function.arguments)["city"], str)


def test_responses_function_call_arguments_delta_events(client: openai.OpenAI) -> None:
    tools: Any = [{"type": "function", "name": "get_weather", "parameters": CITY, "strict": False}]
    choice: Any = {"type": "function", "name": "get_weather"}
    ask = ASK[0]["content"]
    with client.responses.stream(
        model=MODEL, input=ask, tools=tools, tool_choice=choice, max_output_tokens=LIMIT, temperature=0
    ) as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [e.type for e in events]
    added = next(e for e in events if e.type == "response.output_item.added")
    assert added.item.type == "function_call" and added.item.name == "get_weather"
    deltas = [e for e in events if e.type == "response.function_call_arguments.delta"]
    (done,) = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert len(deltas) > 1 and {(d.item_id, d.output_index) for d in deltas} == {(added.item.id, added.output_index)}
    assert kinds.index("response.output_item.added") < kinds.index("response.function_call_arguments.delta")
    assert kinds.index("response.function_call_arguments.done") < kinds.index("response.completed")
    (call,) = [item for item in final.output if item.type == "function_call"]
    assert "".join(d.delta for d in deltas) == done.arguments == call.arguments
    assert call.id == added.item.id and call.call_id == added.item.call_id  # type: ignore[union-attr]
    assert isinstance(json.loads(call.arguments)["city"], str)


@pytest.fixture(scope="module")
def claude(server: Any) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=60) as sdk:
        yield sdk


def test_anthropic_input_json_delta_pieces_make_the_final_input(claude: anthropic.Anthropic) -> None:
    with claude.messages.stream(
        model=MODEL,
        max_tokens=LIMIT,
        messages=ASK,
        tools=[{"name": "get_weather", "input_schema": CITY}],
        tool_choice={"type": "tool", "name": "get_weather"},
        extra_body={"temperature": 0},
    ) as stream:
        events = list(stream)
        final = stream.get_final_message()
    assert isinstance(anthropic_streamed_call(events, final)["city"], str)
