"""The shared OpenAI chat TypedDicts name only fields OpenAI's own spec has (plus the one
de-facto extension we write on purpose), and every field the spec requires."""

from __future__ import annotations

from typing import Any

import pytest

from asgi_llm.wire import openai_chat as wire

EXTENSIONS = {"reasoning_content"}  # llama.cpp's and DeepSeek's reasoning field, documented in README

PAIRS = [
    (wire.ChatCompletion, ["CreateChatCompletionResponse"]),
    (wire.ChatCompletionChunk, ["CreateChatCompletionStreamResponse"]),
    (wire.ChatMessage, ["ChatCompletionResponseMessage", "ChatCompletionRequestAssistantMessage",
                        "ChatCompletionRequestToolMessage", "ChatCompletionRequestUserMessage"]),
    (wire.ToolCall, ["ChatCompletionMessageToolCall"]),
    (wire.Tool, ["ChatCompletionTool"]),
    (wire.FunctionDefinition, ["FunctionObject"]),
    (wire.NamedToolChoice, ["ChatCompletionNamedToolChoice"]),
    (wire.Usage, ["CompletionUsage"]),
    (wire.ChunkToolCall, ["ChatCompletionMessageToolCallChunk"]),
    (wire.ChunkDelta, ["ChatCompletionStreamResponseDelta"]),
    (wire.TokenLogprob, ["ChatCompletionTokenLogprob"]),
    (wire.ResponseFormat, ["ResponseFormatText", "ResponseFormatJsonObject", "ResponseFormatJsonSchema"]),
]


def _keys(shape: Any) -> tuple[frozenset[str], frozenset[str]]:
    return shape.__required_keys__, shape.__optional_keys__


@pytest.mark.parametrize(("shape", "components"), PAIRS, ids=[shape.__name__ for shape, _ in PAIRS])
def test_a_shared_shape_matches_the_spec(openai_spec: dict[str, Any], shape: Any, components: list[str]) -> None:
    schemas = [openai_spec["components"]["schemas"][name] for name in components]
    properties = {key for schema in schemas for key in schema["properties"]}
    required, optional = _keys(shape)
    assert (required | optional) - EXTENSIONS <= properties
    for schema in schemas[:1]:  # the spec's required fields of the primary shape are required here too
        assert set(schema.get("required", ())) - {"function_call"} <= required | optional
