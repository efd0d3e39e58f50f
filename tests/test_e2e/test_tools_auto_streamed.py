"""`tool_choice: auto` with the real model: a call it begins on its own (shown one earlier call
and its result, SmolLM2 makes the next) is held to its grammar and streams as it is decoded,
through each official SDK's stream helpers: more than one piece, under the call's own id, and
the pieces concatenate to exactly the arguments the final events and the non-streamed reply
report. Ollama sends each call whole, as Ollama does."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import ollama
import openai
import pytest

from .tool_streams import anthropic_streamed_call

pytestmark = pytest.mark.model

MODEL = "SmolLM2-135M-Instruct"
CITY: dict[str, Any] = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 24}},
    "required": ["city"],
    "additionalProperties": False,
}
ABOUT = "Get the current weather in a city"
OSLO = '{"city": "Oslo"}'
ASK = "What is the weather in Paris?"
LIMIT = 40
CHAT_TOOLS: Any = [{"type": "function", "function": {"name": "get_weather", "description": ABOUT, "parameters": CITY}}]
CHAT: Any = [
    {"role": "user", "content": "What is the weather in Oslo?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": OSLO}}],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "12C and clear"},
    {"role": "user", "content": ASK},
]


def _chat(**extra: Any) -> Any:
    """The chat request's arguments: greedy, one call at most."""
    options = {"model": MODEL, "messages": CHAT, "tools": CHAT_TOOLS, "max_tokens": LIMIT, "temperature": 0}
    return {**options, "parallel_tool_calls": False, **extra}


def test_chat_auto_call_arguments_stream_in_pieces(client: openai.OpenAI) -> None:
    whole = client.chat.completions.create(**_chat())
    (expected,) = whole.choices[0].message.tool_calls or []
    with client.chat.completions.stream(**_chat()) as stream:
        events = list(stream)
        final = stream.get_final_completion()
    raw = [c for e in events if e.type == "chunk" for c in e.chunk.choices[0].delta.tool_calls or ()]
    assert raw[0].id and raw[0].id.startswith("call_") and raw[0].function and raw[0].function.name == "get_weather"
    assert all(c.index == 0 and c.id is None for c in raw[1:])  # every later piece names the call by its index
    pieces = [e.arguments_delta for e in events if e.type == "tool_calls.function.arguments.delta"]
    (done,) = [e for e in events if e.type == "tool_calls.function.arguments.done"]
    (call,) = final.choices[0].message.tool_calls or []
    assert len(pieces) > 1 and "".join(pieces) == done.arguments == call.function.arguments
    assert call.id == raw[0].id and final.choices[0].finish_reason == "tool_calls"
    assert call.function.arguments == expected.function.arguments  # type: ignore[union-attr]
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    assert not final.choices[0].message.content


def test_a_stop_sequence_does_not_cut_a_held_call(client: openai.OpenAI) -> None:
    """A call held to its grammar is not cut by a stop sequence (here a quote, which every
    argument name holds), as a forced call is not."""
    reply = client.chat.completions.create(**_chat(stop=['"']))
    (call,) = reply.choices[0].message.tool_calls or []
    assert json.loads(call.function.arguments) == {"city": "Paris"}  # type: ignore[union-attr]
    assert reply.choices[0].finish_reason == "tool_calls"


def test_responses_auto_call_arguments_delta_events(client: openai.OpenAI) -> None:
    tools: Any = [
        {"type": "function", "name": "get_weather", "description": ABOUT, "parameters": CITY, "strict": False}
    ]
    history: Any = [
        {"role": "user", "content": "What is the weather in Oslo?"},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": OSLO},
        {"type": "function_call_output", "call_id": "call_1", "output": "12C and clear"},
        {"role": "user", "content": ASK},
    ]
    with client.responses.stream(
        model=MODEL, input=history, tools=tools, max_output_tokens=LIMIT, temperature=0, parallel_tool_calls=False
    ) as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [e.type for e in events]
    added = next(e for e in events if e.type == "response.output_item.added")
    assert added.item.type == "function_call" and added.item.name == "get_weather"
    deltas = [e for e in events if e.type == "response.function_call_arguments.delta"]
    (done,) = [e for e in events if e.type == "response.function_call_arguments.done"]
    (item_done,) = [e for e in events if e.type == "response.output_item.done"]
    where = {(added.item.id, added.output_index)}
    assert len(deltas) > 1 and {(d.item_id, d.output_index) for d in deltas} == where
    assert {(done.item_id, done.output_index), (item_done.item.id, item_done.output_index)} == where
    assert kinds.index("response.output_item.added") < kinds.index("response.function_call_arguments.delta")
    assert kinds.index("response.function_call_arguments.done") < kinds.index("response.completed")
    (call,) = [item for item in final.output if item.type == "function_call"]
    assert "".join(d.delta for d in deltas) == done.arguments == call.arguments
    assert call.id == added.item.id and call.call_id == added.item.call_id  # type: ignore[union-attr]
    assert json.loads(call.arguments) == {"city": "Paris"}


@pytest.fixture(scope="module")
def claude(server: Any) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=60) as sdk:
        yield sdk


def test_anthropic_auto_call_input_json_deltas(claude: anthropic.Anthropic) -> None:
    history: Any = [
        {"role": "user", "content": "What is the weather in Oslo?"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Oslo"}}],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "12C and clear"},
                {"type": "text", "text": ASK},
            ],
        },
    ]
    with claude.messages.stream(
        model=MODEL,
        max_tokens=LIMIT,
        messages=history,
        tools=[{"name": "get_weather", "description": ABOUT, "input_schema": CITY}],
        tool_choice={"type": "auto", "disable_parallel_tool_use": True},
        extra_body={"temperature": 0},
    ) as stream:
        events = list(stream)
        final = stream.get_final_message()
    assert anthropic_streamed_call(events, final) == {"city": "Paris"}


def test_ollama_streams_each_auto_call_whole(server: Any) -> None:
    history: Any = [
        {"role": "user", "content": "What is the weather in Oslo?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}],
        },
        {"role": "tool", "content": "12C and clear"},
        {"role": "user", "content": ASK},
    ]
    tools: Any = CHAT_TOOLS
    options = {"temperature": 0, "num_predict": LIMIT}
    sdk = ollama.Client(host=server.url, timeout=60)
    try:
        parts = list(sdk.chat(model=MODEL, messages=history, tools=tools, options=options, stream=True))
        whole = sdk.chat(model=MODEL, messages=history, tools=tools, options=options)
    finally:
        sdk.close()
    called = [part for part in parts if part.message.tool_calls]
    assert len(called) == 1 and len(called[0].message.tool_calls or ()) == 1  # one whole call, in one part
    (call,) = called[0].message.tool_calls or ()
    assert call.function.name == "get_weather" and dict(call.function.arguments) == {"city": "Paris"}
    assert [(c.function.name, dict(c.function.arguments)) for c in whole.message.tool_calls or ()] == [
        ("get_weather", {"city": "Paris"})
    ]
    assert parts[-1].done and not any(p.done for p in parts[:-1])


def test_a_call_begun_without_room_to_end_is_not_streamed(client: openai.OpenAI) -> None:
    """Where the tokens left cannot hold the call's shortest ending, it is held whole as before
    and, cut off unfinished, goes out as the text it was: never a call with broken arguments.
    (The stream helper refuses a reply cut by its length: the chunks are read as they come.)"""
    chunks = [c for c in client.chat.completions.create(**_chat(max_tokens=12), stream=True) if c.choices]
    assert not [c for c in chunks if c.choices[0].delta.tool_calls]
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert text.startswith('{"name":') and "get_weather" in text and chunks[-1].choices[0].finish_reason == "length"
