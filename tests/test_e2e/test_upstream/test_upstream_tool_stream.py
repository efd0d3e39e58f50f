"""A gateway passes an upstream's streamed tool-call arguments on as they come, piece by piece,
not gathered into one: the upstream here is a second `asgi-llm serve`, whose calls (forced, and
begun on the model's own under `auto`) stream their arguments as they are decoded."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

pytestmark = pytest.mark.model

Gateway = Any  # this folder's conftest.Gateway

CITY: dict[str, Any] = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 24}},
    "required": ["city"],
    "additionalProperties": False,
}
TOOLS: Any = [{"type": "function", "function": {"name": "get_weather", "parameters": CITY}}]
HISTORY: Any = [  # shown one earlier call, the model makes the next on its own
    {"role": "user", "content": "What is the weather in Oslo?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "12C and clear"},
    {"role": "user", "content": "What is the weather in Paris?"},
]
FORCED: Any = {"type": "function", "function": {"name": "get_weather"}}


@pytest.fixture(scope="module")
def oai(asgi_llm_gateway: Gateway) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{asgi_llm_gateway.url}/v1", api_key="unused", max_retries=0, timeout=60) as sdk:
        yield sdk


@pytest.mark.parametrize("choice", [pytest.param(FORCED, id="forced"), pytest.param("auto", id="auto")])
def test_chat_call_arguments_pass_through_in_pieces(oai: openai.OpenAI, choice: Any) -> None:
    with oai.chat.completions.stream(
        model="remote", messages=HISTORY, tools=TOOLS, tool_choice=choice, max_tokens=40, temperature=0
    ) as stream:
        events = list(stream)
        final = stream.get_final_completion()
    pieces = [e.arguments_delta for e in events if e.type == "tool_calls.function.arguments.delta"]
    (call,) = final.choices[0].message.tool_calls or []
    assert len(pieces) > 1 and "".join(pieces) == call.function.arguments
    assert isinstance(json.loads(call.function.arguments)["city"], str)
    assert final.choices[0].finish_reason == "tool_calls"


def test_anthropic_input_json_deltas_pass_through_in_pieces(asgi_llm_gateway: Gateway) -> None:
    with (
        anthropic.Anthropic(base_url=asgi_llm_gateway.url, api_key="unused", max_retries=0, timeout=60) as claude,
        claude.messages.stream(
            model="remote",
            max_tokens=40,
            messages=[{"role": "user", "content": "What is the weather in Paris?"}],
            tools=[{"name": "get_weather", "input_schema": CITY}],
            tool_choice={"type": "tool", "name": "get_weather"},
            extra_body={"temperature": 0},
        ) as stream,
    ):
        events = list(stream)
        final = stream.get_final_message()
    deltas = [e for e in events if e.type == "content_block_delta"]
    assert len(deltas) > 1 and all(d.delta.type == "input_json_delta" for d in deltas)
    (use,) = [block for block in final.content if block.type == "tool_use"]
    assert use.input == json.loads("".join(d.delta.partial_json for d in deltas))  # type: ignore[union-attr]
