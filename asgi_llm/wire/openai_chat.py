"""OpenAI Chat Completions' JSON: the message, tool and usage shapes, and the response objects.

The OpenAI adapter writes responses and chunks in these shapes; the upstream engine writes its
requests' messages, tools and formats in them. Incoming bodies are not typed here: they are
untrusted, and validated where they arrive (pydantic in the adapter, defensive reads upstream).
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict

__all__ = [
    "ChatCompletion",
    "ChatCompletionChunk",
    "ChatMessage",
    "Choice",
    "ChunkChoice",
    "ChunkDelta",
    "ChunkFunction",
    "ChunkToolCall",
    "ContentPart",
    "FunctionCall",
    "FunctionDefinition",
    "ImageUrl",
    "JsonSchemaFormat",
    "Logprobs",
    "NamedToolChoice",
    "ResponseFormat",
    "TokenLogprob",
    "Tool",
    "ToolCall",
    "ToolChoice",
    "TopLogprob",
    "Usage",
]


class FunctionCall(TypedDict):
    name: str
    arguments: str
    """JSON text, as the model wrote it."""


class ToolCall(TypedDict):
    id: str
    type: Literal["function"]
    function: FunctionCall


class ImageUrl(TypedDict):
    url: str
    """A `data:` URL or an `http(s)` one."""
    detail: NotRequired[str]


class ContentPart(TypedDict):
    """One part of a message with images: `text` with its `text`, or `image_url` with its URL."""

    type: str
    text: NotRequired[str]
    image_url: NotRequired[ImageUrl]


class ChatMessage(TypedDict):
    role: str
    content: str | list[ContentPart] | None
    """Text; parts where a request's message carries images (the upstream engine's requests)."""
    name: NotRequired[str]
    tool_calls: NotRequired[list[ToolCall]]
    tool_call_id: NotRequired[str]
    refusal: NotRequired[str | None]
    reasoning_content: NotRequired[str]
    """The de-facto field of llama.cpp and DeepSeek for the reasoning text."""


class FunctionDefinition(TypedDict):
    name: str
    parameters: dict[str, Any]
    description: NotRequired[str]


class Tool(TypedDict):
    type: Literal["function"]
    function: FunctionDefinition


class _FunctionName(TypedDict):
    name: str


class NamedToolChoice(TypedDict):
    type: Literal["function"]
    function: _FunctionName


ToolChoice = Literal["auto", "none", "required"] | NamedToolChoice


class JsonSchemaFormat(TypedDict):
    name: str
    schema: dict[str, Any]
    strict: bool | None


class ResponseFormat(TypedDict):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: NotRequired[JsonSchemaFormat]


class _PromptDetails(TypedDict):
    cached_tokens: int


class _CompletionDetails(TypedDict):
    reasoning_tokens: int


class Usage(TypedDict):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: _PromptDetails
    completion_tokens_details: _CompletionDetails


class TopLogprob(TypedDict):
    token: str
    logprob: float
    bytes: list[int]


class TokenLogprob(TypedDict):
    token: str
    logprob: float | None
    """Never None in chat: only an echoed prompt's first token has none."""
    bytes: list[int]
    top_logprobs: list[TopLogprob]


class Logprobs(TypedDict):
    content: list[TokenLogprob]
    refusal: None


class Choice(TypedDict):
    index: int
    message: ChatMessage
    logprobs: Logprobs | None
    finish_reason: str


class ChatCompletion(TypedDict):
    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[Choice]
    usage: Usage


class ChunkFunction(TypedDict, total=False):
    name: str
    arguments: str


class ChunkToolCall(TypedDict):
    index: int
    function: ChunkFunction
    id: NotRequired[str]
    type: NotRequired[Literal["function"]]


class ChunkDelta(TypedDict, total=False):
    role: Literal["assistant"]
    content: str
    reasoning_content: str
    tool_calls: list[ChunkToolCall]


class ChunkChoice(TypedDict):
    index: int
    delta: ChunkDelta
    logprobs: Logprobs | None
    finish_reason: str | None


class ChatCompletionChunk(TypedDict):
    id: str
    object: Literal["chat.completion.chunk"]
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: NotRequired[Usage | None]
