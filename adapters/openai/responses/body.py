"""OpenAI Responses, the request bodies: `POST /responses` and `POST /responses/input_tokens`
(the spec's `TokenCountsBody`: what they share, nothing that only generating reads), and the
checks of fields this server refuses or reads with rules of its own."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from asgi_llm.core import InvalidRequest, Unsupported

from ..common import refuse_service
from .input import Wire, validate_at
from .sealed import INCLUDE

__all__ = [
    "HANDLED",
    "LOGPROBS",
    "Body",
    "CountBody",
    "FunctionTool",
    "ResponsesBody",
    "TextFormat",
    "refuse_generation",
    "refuse_unsupported",
]

LOGPROBS = "message.output_text.logprobs"
_INCLUDABLE = (
    "file_search_call.results",
    "web_search_call.results",
    "web_search_call.action.sources",
    "message.input_image.image_url",
    "computer_call_output.output.image_url",
    "code_interpreter_call.outputs",
    INCLUDE,
    LOGPROBS,
)
"""The spec's `include` values; `LOGPROBS` and sealed reasoning (`sealed.py`) mean something
here, the rest are for built-in tools and stored files this server does not have."""
_HONOURED = (LOGPROBS, INCLUDE)


class TextFormat(Wire):
    type: Literal["text", "json_object", "json_schema"]
    name: str | None = None
    description: str | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None


class _TextParam(Wire):
    format: TextFormat | None = None
    verbosity: Literal["low", "medium", "high"] | None = None
    """`medium`, the default (the Agents SDK and Codex send it), is what a local model does; the others are refused."""


class _ReasoningParam(Wire):
    effort: str | None = None
    summary: str | None = None
    """`auto` (Codex sends it): no summary is made, the reasoning item's `summary` stays `[]`
    and its `content` has the reasoning text; `concise` and `detailed` are refused."""


class FunctionTool(Wire):
    type: Literal["function"]
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None
    defer_loading: bool | None = None
    """False, the default, is what this server does: every tool is in the prompt; true is refused."""


class _StreamOptions(Wire):
    include_obfuscation: bool | None = None


class Body(Wire):
    """What creating a response and counting its input tokens share."""

    input: str | list[Any] | None = None  # items are checked one by one, so errors name `input[i]...`
    instructions: str | None = None
    tools: list[Any] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    text: _TextParam | None = None
    reasoning: _ReasoningParam | None = None
    truncation: Literal["auto", "disabled"] | None = None
    previous_response_id: str | None = None


class ResponsesBody(Body):
    model: str
    max_output_tokens: Annotated[int, Field(ge=1)] | None = None
    temperature: Annotated[float, Field(ge=0, le=2)] | None = None
    top_p: Annotated[float, Field(ge=0, le=1)] | None = None
    top_logprobs: Annotated[int, Field(ge=0, le=20)] | None = None
    include: list[str] | None = None
    metadata: Annotated[dict[str, str], Field(max_length=16)] | None = None
    store: bool | None = None
    background: bool | None = None
    stream: bool | None = None
    user: str | None = None
    max_tool_calls: Annotated[int, Field(ge=1)] | None = None
    service_tier: str | None = None  # `auto` or `default`: one tier serves every request (`refuse_service`)
    prompt_cache_retention: str | None = None  # `in_memory`, where the prompt cache is (`refuse_service`)
    safety_identifier: str | None = None  # the request's user where `user` is not given (`served_user`)
    speculative: bool | None = None  # ours: false, no drafted tokens (prompt lookup, grammar jump-forward)


class CountBody(Body):
    """`POST /responses/input_tokens`: the spec's `TokenCountsBody`, nothing that only generating reads."""

    model: str | None = None  # optional here: a previous response can name it


HANDLED = ("conversation", "prompt", "prompt_cache_key", "stream_options")
"""Extras of a create request checked below. `prompt_cache_key` needs nothing done: every
prompt's prefix is cached, whatever key routes it."""


def refuse_unsupported(wire: Body) -> None:
    """Never ignore what a client relies on: say it is unsupported, naming the param."""
    if wire.truncation == "auto":
        raise Unsupported("Automatic truncation is not supported; the input must fit the context.", param="truncation")
    extra = wire.model_extra or {}
    for name in ("conversation", "prompt"):
        if extra.get(name) is not None:
            raise Unsupported(f"'{name}' is not supported by this server.", param=name)
    if wire.text is not None and wire.text.verbosity not in (None, "medium"):
        raise Unsupported(
            "'text.verbosity' other than 'medium' is not supported: a local model's length follows its "
            "prompt and 'max_output_tokens'; send 'medium' or leave it out.",
            param="text.verbosity",
        )
    if wire.reasoning is not None and wire.reasoning.summary not in (None, "auto"):
        raise Unsupported(
            "Reasoning summaries are not supported; the reasoning item carries the model's own "
            "reasoning text. Send 'auto' or leave 'reasoning.summary' out.",
            param="reasoning.summary",
        )


def refuse_generation(wire: ResponsesBody) -> None:
    """The checks of fields that only creating a response has."""
    if wire.max_tool_calls is not None and wire.max_tool_calls != 1:
        raise Unsupported(
            "'max_tool_calls' can only be 1 (one call, as with parallel_tool_calls false).", param="max_tool_calls"
        )
    if wire.background and wire.store is False:
        raise InvalidRequest("A background response is stored: 'store' cannot be false with it.", param="background")
    for i, value in enumerate(wire.include or ()):
        if value not in _INCLUDABLE:
            raise InvalidRequest(f"Invalid value for 'include[{i}]': '{value}'.", param=f"include[{i}]")
        if value not in _HONOURED:
            raise Unsupported(
                f"'include' value '{value}' is not supported; only '{LOGPROBS}' and '{INCLUDE}' are.",
                param=f"include[{i}]",
            )
    refuse_service(wire.service_tier, wire.prompt_cache_retention)
    _refuse_metadata(wire.metadata or {})
    _refuse_extras(wire.model_extra or {})


def _refuse_metadata(metadata: dict[str, str]) -> None:
    for key, value in metadata.items():
        if len(key) > 64 or len(value) > 512:
            raise InvalidRequest(
                "'metadata' keys are at most 64 characters and values at most 512: "
                f"'{key[:64]}' is {len(key)} characters, its value {len(value)}.",
                param="metadata",
            )


def _refuse_extras(extra: dict[str, Any]) -> None:
    """The create request's own extras (`HANDLED` but the two refused outright)."""
    cache_key = extra.get("prompt_cache_key")
    if cache_key is not None and not isinstance(cache_key, str):
        raise InvalidRequest("Invalid type for 'prompt_cache_key': expected a string.", param="prompt_cache_key")
    if extra.get("stream_options") is not None:
        options = validate_at(_StreamOptions, extra["stream_options"], "stream_options")  # unknown keys refused too
        if options.include_obfuscation:
            param = "stream_options.include_obfuscation"
            raise Unsupported("Stream obfuscation is not supported; send false or leave it out.", param=param)
