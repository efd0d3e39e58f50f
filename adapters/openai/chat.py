"""OpenAI Chat Completions: `POST /chat/completions`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import Field

from asgi_llm.core import (
    ChatRequest,
    Finish,
    GenerationEvent,
    InvalidRequest,
    LLMError,
    OutputFormat,
    Reasoning,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    ToolChoice,
    ToolSpec,
    Unsupported,
    total_usage,
)
from asgi_llm.wire.openai_chat import (
    ChatCompletion,
    ChatCompletionChunk,
    ChatMessage,
    Choice,
    ChunkChoice,
    ChunkDelta,
    ChunkFunction,
    ChunkToolCall,
    Logprobs,
)
from asgi_llm.wire.openai_chat import ToolCall as ToolCallOut

from ..base import GenerateRoute, Meta, Parsed, Unrecorded, refuse_unrecognized
from ..json_output import checked_name, json_object, json_schema, tool_names, tool_parameters
from ..logprobs import token_logprobs
from .chat_messages import WireMessage, format_note, message, noted
from .common import (
    SSE_DONE,
    SamplingBody,
    Wire,
    adapter_scales,
    effort_reasoning,
    refuse_service,
    render_error,
    sampling_params,
    served_user,
    sse,
    stop_problem,
    stream_flags,
    tag_error,
    usage_dict,
    validated,
)

__all__ = ["ROUTE", "ChatStream", "parse", "render"]


class WireFunction(Wire):
    name: str
    """1 to 64 letters, digits, '_' or '-' (`checked_name`), told apart from the other tools'."""
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class WireTool(Wire):
    type: Literal["function"]
    function: WireFunction


class NamedFunction(Wire):
    name: str


class NamedToolChoice(Wire):
    type: Literal["function"]
    function: NamedFunction


class JsonSchemaSpec(Wire):
    name: str
    """As a tool's name is spelled (`checked_name`)."""
    description: str | None = None
    """What the format is for: told to the model in the system message (`format_note`)."""
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None


class ResponseFormat(Wire):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaSpec | None = None


class ChatBody(SamplingBody):
    messages: Annotated[list[WireMessage], Field(min_length=1)]
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    max_completion_tokens: Annotated[int, Field(ge=1)] | None = None
    logprobs: bool | None = None
    top_logprobs: Annotated[int, Field(ge=0, le=20)] | None = None
    tools: list[WireTool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None
    response_format: ResponseFormat | None = None
    reasoning_effort: str | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    """vLLM's and llama.cpp's server's way to pass `enable_thinking`; the one key honoured here."""
    store: bool | None = None
    """False is honoured (nothing is stored); true is refused: chat completions are not stored here."""
    service_tier: str | None = None
    """`auto` or `default`: one tier serves every request (`refuse_service`)."""
    prompt_cache_key: str | None = None
    """Needs nothing done, as on /responses: every prompt's prefix is cached, whatever key routes it."""
    prompt_cache_retention: str | None = None
    """`in_memory`, where the prompt cache is (`refuse_service`)."""
    safety_identifier: str | None = None
    """The request's user where `user` is not given (`served_user`)."""


@dataclass(frozen=True)
class ChatOptions:
    include_usage: bool = False


def parse(body: Any) -> Parsed[ChatRequest, ChatOptions]:
    wire = validated(ChatBody, body, stop=stop_problem)
    _refuse_unsupported(wire)
    refuse_unrecognized(wire, handled=_HANDLED)
    if wire.top_logprobs and not wire.logprobs:
        raise InvalidRequest("'top_logprobs' requires 'logprobs' to be true.", param="top_logprobs")
    if wire.grammar and wire.tools:
        raise InvalidRequest("Give 'grammar' or 'tools', not both: a tool call has its own grammar.", param="grammar")
    tool_names([t.function.name for t in wire.tools or ()], lambda i: f"tools[{i}].function.name")
    stream, include_usage = stream_flags(wire)
    messages = tuple(message(m, i) for i, m in enumerate(wire.messages))
    spec = wire.response_format.json_schema if wire.response_format is not None else None
    note = format_note(spec.name, spec.description) if spec is not None else None
    sampling = sampling_params(
        wire,
        max_tokens=wire.max_completion_tokens if wire.max_completion_tokens is not None else wire.max_tokens,
        logprobs=bool(wire.logprobs),
        top_logprobs=wire.top_logprobs or 0,
        output_format=_output_format(wire.response_format),
        max_tokens_param="max_completion_tokens" if wire.max_completion_tokens is not None else "max_tokens",
    )
    request = ChatRequest(
        model=wire.model,
        messages=noted(messages, note) if note else messages,
        sampling=sampling,
        n=wire.n or 1,
        user=served_user(wire.user, wire.safety_identifier),
        tools=tuple(
            ToolSpec(f.name, f.description, tool_parameters(f.parameters, f"tools[{i}].function.parameters"))
            for i, f in enumerate(t.function for t in wire.tools or ())
        ),
        tool_choice=_tool_choice(wire),
        parallel_tool_calls=wire.parallel_tool_calls is not False,
        reasoning=_reasoning(wire),
        adapters=adapter_scales(wire.lora),
    )
    return Parsed(request, ChatOptions(include_usage), stream=stream)


def _tool_choice(wire: ChatBody) -> ToolChoice:
    choice = wire.tool_choice
    if isinstance(choice, NamedToolChoice):
        if choice.function.name not in {t.function.name for t in wire.tools or ()}:
            raise InvalidRequest(
                f"tool_choice names '{choice.function.name}', which is not in 'tools'.", param="tool_choice"
            )
        return choice.function.name
    if choice == "required" and not wire.tools:
        raise InvalidRequest("tool_choice 'required' needs at least one tool.", param="tool_choice")
    return choice or "auto"


def _output_format(fmt: ResponseFormat | None) -> OutputFormat | None:
    if fmt is None:
        return None
    spec, param = fmt.json_schema, "response_format.json_schema"
    if spec is not None and fmt.type != "json_schema":
        raise InvalidRequest(f"'{param}' is only for the type 'json_schema', not '{fmt.type}'.", param=param)
    if fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return json_object("response_format")
    if spec is None:
        raise InvalidRequest(f"Missing required parameter: '{param}'.", param=param)
    checked_name(spec.name, "response_format.json_schema.name")
    if spec.schema_ is None:  # no schema: any JSON object
        return json_object("response_format.json_schema")
    return json_schema(spec.schema_, "response_format.json_schema.schema", name=spec.name, strict=spec.strict)


def _reasoning(wire: ChatBody) -> Reasoning | None:
    """`reasoning_effort`, or `chat_template_kwargs.enable_thinking`; both must agree."""
    by_effort = effort_reasoning(wire.reasoning_effort, "reasoning_effort")
    kwargs = wire.chat_template_kwargs or {}
    for key in kwargs:
        if key != "enable_thinking":
            param = f"chat_template_kwargs.{key}"
            raise Unsupported(f"'{param}' is not supported; only 'enable_thinking' is.", param=param)
    switch = kwargs.get("enable_thinking")
    if switch is None:
        return by_effort
    param = "chat_template_kwargs.enable_thinking"
    if not isinstance(switch, bool):
        raise InvalidRequest(f"'{param}' must be true or false.", param=param)
    if by_effort is not None and by_effort.enabled != switch:
        raise InvalidRequest(f"'{param}' and 'reasoning_effort' disagree.", param=param)
    return Reasoning(enabled=switch, param=param)


_HANDLED = ("modalities",)
"""Extras checked below: text output is what we give, anything else is refused."""


def _refuse_unsupported(wire: ChatBody) -> None:
    """Never ignore what a client relies on: say it is unsupported, naming the param."""
    extra = wire.model_extra or {}
    if extra.get("audio") or extra.get("modalities") not in (None, ["text"]):
        raise Unsupported("Only text output is supported.", param="modalities")
    if wire.store:
        raise Unsupported("Chat completions are not stored here; send 'store' false or leave it out.", param="store")
    refuse_service(wire.service_tier, wire.prompt_cache_retention)


def render(parsed: Parsed[ChatRequest, ChatOptions], meta: Meta, events: Sequence[GenerationEvent]) -> ChatCompletion:
    n = parsed.request.n
    texts: list[list[str]] = [[] for _ in range(n)]
    reasoning: list[list[str]] = [[] for _ in range(n)]
    logprobs: list[list[Any]] = [[] for _ in range(n)]
    calls: list[dict[int, ToolCallOut]] = [{} for _ in range(n)]
    finishes: dict[int, Finish] = {}
    for event in events:
        if isinstance(event, TextDelta):
            texts[event.index].append(event.text)
            logprobs[event.index].extend(event.logprobs)
        elif isinstance(event, ReasoningDelta):
            reasoning[event.index].append(event.text)
        elif isinstance(event, ToolCallStart):
            calls[event.index][event.call_index] = _call_out(event.id, event.name, "")
        elif isinstance(event, ToolCallDelta):
            calls[event.index][event.call_index]["function"]["arguments"] += event.arguments
        elif isinstance(event, Finish):
            finishes[event.index] = event
    choices: list[Choice] = [
        {
            "index": i,
            "message": _message_out("".join(texts[i]), "".join(reasoning[i]), list(calls[i].values())),
            "logprobs": {"content": token_logprobs(logprobs[i]), "refusal": None}
            if parsed.request.sampling.logprobs
            else None,
            "finish_reason": finishes[i].reason if i in finishes else "stop",
        }
        for i in range(n)
    ]
    return {
        "id": f"chatcmpl-{meta.request_id}",
        "object": "chat.completion",
        "created": meta.created,
        "model": meta.model,
        "choices": choices,
        "usage": usage_dict(total_usage(finishes.values())),
    }


def _call_out(call_id: str, name: str, arguments: str) -> ToolCallOut:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _message_out(content: str, reasoning: str, calls: list[ToolCallOut]) -> ChatMessage:
    message: ChatMessage = {"role": "assistant", "content": content or (None if calls else ""), "refusal": None}
    if calls:
        message["tool_calls"] = calls
    if reasoning:
        message["reasoning_content"] = reasoning  # the de-facto field of llama.cpp and DeepSeek
    return message


def _chunk_choice(
    index: int, delta: ChunkDelta, logprobs: Logprobs | None = None, finish_reason: str | None = None
) -> ChunkChoice:
    return {"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish_reason}


class ChatStream(Unrecorded):
    """`chat.completion.chunk` events: role first, then content, a finish chunk per choice."""

    media_type = "text/event-stream"

    def __init__(self, parsed: Parsed[ChatRequest, ChatOptions], meta: Meta) -> None:
        self._meta = meta
        self._logprobs = parsed.request.sampling.logprobs
        self._include_usage = parsed.options.include_usage
        self._opened: set[int] = set()
        self._finishes: list[Finish] = []

    def _chunk(self, choices: list[ChunkChoice]) -> ChatCompletionChunk:
        chunk: ChatCompletionChunk = {
            "id": f"chatcmpl-{self._meta.request_id}",
            "object": "chat.completion.chunk",
            "created": self._meta.created,
            "model": self._meta.model,
            "choices": choices,
        }
        if self._include_usage:
            chunk["usage"] = None
        return chunk

    def open(self) -> bytes:
        return b""

    def event(self, event: GenerationEvent) -> bytes:
        head = b""
        if event.index not in self._opened:
            self._opened.add(event.index)
            head = sse(self._chunk([_chunk_choice(event.index, {"role": "assistant", "content": ""})]))
        if isinstance(event, TextDelta):
            logprobs: Logprobs | None = (
                {"content": token_logprobs(event.logprobs), "refusal": None} if self._logprobs else None
            )
            choice = _chunk_choice(event.index, {"content": event.text}, logprobs)
        elif isinstance(event, ReasoningDelta):
            choice = _chunk_choice(event.index, {"reasoning_content": event.text})
        elif isinstance(event, ToolCallStart):
            function: ChunkFunction = {"name": event.name, "arguments": ""}
            start: ChunkToolCall = {"index": event.call_index, "id": event.id, "type": "function", "function": function}
            choice = _chunk_choice(event.index, {"tool_calls": [start]})
        elif isinstance(event, ToolCallDelta):
            delta: ChunkToolCall = {"index": event.call_index, "function": {"arguments": event.arguments}}
            choice = _chunk_choice(event.index, {"tool_calls": [delta]})
        elif isinstance(event, ToolCallEnd):
            return head
        else:
            self._finishes.append(event)
            choice = _chunk_choice(event.index, {}, finish_reason=event.reason)
        return head + sse(self._chunk([choice]))

    def close(self) -> bytes:
        tail = b""
        if self._include_usage:
            chunk = self._chunk([])
            chunk["usage"] = usage_dict(total_usage(self._finishes))
            tail = sse(chunk)
        return tail + SSE_DONE

    def error(self, error: LLMError) -> bytes:
        body = render_error(error)[1]
        return sse(tag_error(body, self._meta.trace) if self._meta.trace else body)


ROUTE = GenerateRoute(path="/chat/completions", parse=parse, render=render, encoder=ChatStream, body=ChatBody)
