"""OpenAI Responses: `POST /responses` (stateful through `previous_response_id`), retrieve,
delete and `input_items` of stored responses, and `POST /responses/input_tokens`.

A stored response keeps its whole conversation as normalized items (`input_items`: every
earlier turn's input and output, then its own input), so chaining on it is one lookup.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from asgi_llm.core import (
    ChatRequest,
    GenerationEvent,
    InvalidRequest,
    LLMError,
    OutputFormat,
    SamplingParams,
    ToolChoice,
    ToolSpec,
    Unsupported,
)

from ...base import (
    CountRoute,
    Detached,
    GenerateRoute,
    Meta,
    Parsed,
    StateRoute,
    StateStore,
    refuse_unrecognized,
    validate,
)
from ...json_output import json_object, json_schema, tool_parameters
from ..common import effort_reasoning
from .input import Item, messages, normalize_input, validate_at
from .output import Output, ResponsesStream, finished, frames
from .stored import ResponseNotFound, cancel, delete, input_items, retrieve

__all__ = [
    "ROUTES",
    "PreviousResponseNotFound",
    "ResponseNotFound",
    "ResponsesOptions",
    "encoder",
    "parse",
    "parse_count",
    "record",
    "render",
    "render_count",
    "resolve",
]

_LOGPROBS = "message.output_text.logprobs"
_ID_PREFIX = {"message": "msg", "function_call": "fc", "function_call_output": "fco", "reasoning": "rs"}


class PreviousResponseNotFound(LLMError):
    status = 404
    code = "previous_response_not_found"


class _Wire(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)


class _TextFormat(_Wire):
    type: Literal["text", "json_object", "json_schema"]
    name: Annotated[str, Field(min_length=1, max_length=64)] | None = None
    description: str | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None


class _TextParam(_Wire):
    format: _TextFormat | None = None
    verbosity: Literal["low", "medium", "high"] | None = None


class _ReasoningParam(_Wire):
    effort: str | None = None
    summary: str | None = None


class _FunctionTool(_Wire):
    type: Literal["function"]
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class _Body(_Wire):
    input: str | list[Any] | None = None  # items are checked one by one, so errors name `input[i]...`
    instructions: str | None = None
    max_output_tokens: Annotated[int, Field(ge=1)] | None = None
    temperature: Annotated[float, Field(ge=0, le=2)] | None = None
    top_p: Annotated[float, Field(ge=0, le=1)] | None = None
    top_logprobs: Annotated[int, Field(ge=0, le=20)] | None = None
    include: list[str] | None = None
    tools: list[Any] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    text: _TextParam | None = None
    reasoning: _ReasoningParam | None = None
    truncation: Literal["auto", "disabled"] | None = None
    metadata: Annotated[dict[str, str], Field(max_length=16)] | None = None
    store: bool | None = None
    background: bool | None = None
    previous_response_id: str | None = None
    stream: bool | None = None
    user: str | None = None
    max_tool_calls: Annotated[int, Field(ge=1)] | None = None
    speculative: bool | None = None  # ours: false, no drafted tokens (prompt lookup, grammar jump-forward)


class ResponsesBody(_Body):
    model: str


class CountBody(_Body):
    model: str | None = None  # optional here: a previous response can name it


@dataclass(frozen=True)
class ResponsesOptions:
    """What the response object echoes, and what `resolve` and `record` need."""

    instructions: str | None
    input_items: tuple[Item, ...]
    echo: dict[str, Any]
    store: bool = True
    previous_response_id: str | None = None
    history: tuple[Item, ...] = ()
    """The previous response's whole conversation, filled in by `resolve`."""


def parse(body: Any) -> Parsed[ChatRequest, ResponsesOptions]:
    wire = validate(ResponsesBody, body)
    return _parse(wire, wire.model)


def parse_count(body: Any) -> Parsed[ChatRequest, ResponsesOptions]:
    wire = validate(CountBody, body)
    if wire.model is None and wire.previous_response_id is None:
        raise InvalidRequest("Missing required parameter: 'model'.", param="model")
    return _parse(wire, wire.model or "")


def _parse(wire: _Body, model: str) -> Parsed[ChatRequest, ResponsesOptions]:
    _refuse_unsupported(wire)
    refuse_unrecognized(wire, handled=_HANDLED)
    items = normalize_input(wire.input)
    if not items and wire.instructions is None and wire.previous_response_id is None:
        raise InvalidRequest("Missing required parameter: 'input'.", param="input")
    tools, specs = _tools(wire.tools)
    include = wire.include or []
    sampling = SamplingParams(
        max_tokens=wire.max_output_tokens,
        max_tokens_param="max_output_tokens",
        temperature=1.0 if wire.temperature is None else wire.temperature,
        top_p=1.0 if wire.top_p is None else wire.top_p,
        logprobs=_LOGPROBS in include or bool(wire.top_logprobs),
        top_logprobs=wire.top_logprobs or 0,
        output_format=_output_format(wire.text.format if wire.text else None),
        speculative=wire.speculative is not False,
    )
    request = ChatRequest(
        model=model,
        messages=messages(wire.instructions, items),
        sampling=sampling,
        user=wire.user,
        tools=specs,
        tool_choice=_tool_choice(wire.tool_choice, {s.name for s in specs}),
        parallel_tool_calls=wire.parallel_tool_calls is not False and wire.max_tool_calls != 1,
        reasoning=effort_reasoning(wire.reasoning.effort if wire.reasoning else None, "reasoning.effort"),
        prompt_param="input",
    )
    store = wire.store is not False
    options = ResponsesOptions(
        wire.instructions, tuple(items), _echo(wire, tools, sampling), store, wire.previous_response_id
    )
    return Parsed(request, options, stream=bool(wire.stream), background=bool(wire.background))


def _output_format(fmt: _TextFormat | None) -> OutputFormat | None:
    if fmt is None or fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return json_object("text.format")
    for field in ("name", "schema_"):
        if getattr(fmt, field) is None:
            param = f"text.format.{field.rstrip('_')}"
            raise InvalidRequest(f"Missing required parameter: '{param}'.", param=param)
    return json_schema(fmt.schema_, "text.format.schema", name=fmt.name, strict=fmt.strict)


def _format_echo(fmt: _TextFormat | None) -> dict[str, Any]:
    """`text.format` as the response object reports it."""
    if fmt is None or fmt.type != "json_schema":
        return {"type": fmt.type if fmt else "text"}
    echo = {"type": "json_schema", "name": fmt.name, "schema": fmt.schema_, "strict": fmt.strict}
    return echo if fmt.description is None else {**echo, "description": fmt.description}


_HANDLED = ("conversation", "prompt", "prompt_cache_key", "stream_options")
"""Extras checked below. `prompt_cache_key` needs nothing done: every prompt's prefix is
cached, whatever key routes it."""


def _refuse_unsupported(wire: _Body) -> None:
    """Never ignore what a client relies on: say it is unsupported, naming the param."""
    if wire.truncation == "auto":
        raise Unsupported("Automatic truncation is not supported; the input must fit the context.", param="truncation")
    if wire.max_tool_calls is not None and wire.max_tool_calls != 1:
        raise Unsupported("'max_tool_calls' can only be 1 (one call, as with parallel_tool_calls false).", param="max_tool_calls")
    extra = wire.model_extra or {}
    if wire.background and wire.store is False:
        raise InvalidRequest("A background response is stored: 'store' cannot be false with it.", param="background")
    for name in ("conversation", "prompt"):
        if extra.get(name):
            raise Unsupported(f"'{name}' is not supported by this server.", param=name)
    options = extra.get("stream_options")
    if options is not None and (not isinstance(options, dict) or set(options) - {"include_obfuscation"}):
        raise InvalidRequest("'stream_options' takes only 'include_obfuscation'.", param="stream_options")
    if options and options.get("include_obfuscation"):
        param = "stream_options.include_obfuscation"
        raise Unsupported("Stream obfuscation is not supported; send false or leave it out.", param=param)


def _tools(raw: list[Any] | None) -> tuple[list[dict[str, Any]], tuple[ToolSpec, ...]]:
    echo, specs = [], []
    for i, entry in enumerate(raw or ()):
        kind = entry.get("type") if isinstance(entry, dict) else None
        if kind not in (None, "function"):
            raise Unsupported(
                f"Tools of type '{kind}' are not supported; use function tools.", param=f"tools[{i}].type"
            )
        tool = validate_at(_FunctionTool, entry, f"tools[{i}]")
        echo.append(
            {
                "type": "function",
                "name": tool.name,
                "description": tool.description,
                "parameters": tool.parameters,
                "strict": tool.strict,
            }
        )
        specs.append(ToolSpec(tool.name, tool.description, tool_parameters(tool.parameters, f"tools[{i}].parameters")))
    return echo, tuple(specs)


def _tool_choice(raw: str | dict[str, Any] | None, names: set[str]) -> ToolChoice:
    if raw is None:
        return "auto"
    if isinstance(raw, str):
        if raw in ("auto", "none", "required"):
            return raw
        raise InvalidRequest(f"Invalid value for 'tool_choice': '{raw}'.", param="tool_choice")
    name = raw.get("name")
    if raw.get("type") != "function" or not isinstance(name, str):
        raise Unsupported("Only 'auto', 'none', 'required' or a function may be chosen.", param="tool_choice")
    if name not in names:
        raise InvalidRequest(f"Tool choice '{name}' is not among the function tools.", param="tool_choice")
    return name


def _echo(wire: _Body, tools: list[dict[str, Any]], sampling: SamplingParams) -> dict[str, Any]:
    """The request's settings as the response object reports them (defaults filled in)."""
    reasoning = wire.reasoning or _ReasoningParam()
    text: dict[str, Any] = {"format": _format_echo(wire.text.format if wire.text else None)}
    if wire.text is not None and wire.text.verbosity is not None:
        text["verbosity"] = wire.text.verbosity
    choice = wire.tool_choice
    echo: dict[str, Any] = {
        "instructions": wire.instructions,
        "max_output_tokens": wire.max_output_tokens,
        "max_tool_calls": wire.max_tool_calls,
        "parallel_tool_calls": wire.parallel_tool_calls is not False,
        "previous_response_id": wire.previous_response_id,
        "background": bool(wire.background),
        "reasoning": {"effort": reasoning.effort, "summary": reasoning.summary},
        "store": wire.store is not False,
        "temperature": sampling.temperature,
        "text": text,
        "tool_choice": {"type": "function", "name": choice["name"]} if isinstance(choice, dict) else choice or "auto",
        "tools": tools,
        "top_logprobs": sampling.top_logprobs,
        "top_p": sampling.top_p,
        "truncation": "disabled",
        "metadata": wire.metadata or {},
    }
    if wire.user is not None:
        echo["user"] = wire.user
    return echo


def render(parsed: Parsed[ChatRequest, ResponsesOptions], meta: Meta, events: Sequence[GenerationEvent]) -> dict[str, Any]:
    out = Output(meta.request_id)
    for event in events:
        out.feed(event)
    return finished(meta, parsed.options.echo, out)


def encoder(parsed: Parsed[ChatRequest, ResponsesOptions], meta: Meta) -> ResponsesStream:
    return ResponsesStream(parsed.options.echo, meta, keep=parsed.background)


def render_count(parsed: Parsed[ChatRequest, ResponsesOptions], count: int) -> dict[str, Any]:
    return {"object": "response.input_tokens", "input_tokens": count}


async def resolve(parsed: Parsed[ChatRequest, ResponsesOptions], store: StateStore) -> Parsed[ChatRequest, ResponsesOptions]:
    """Puts the previous response's conversation before this request's input.

    Only this request's `instructions` apply: the previous ones are not carried over.
    """
    options = parsed.options
    if options.previous_response_id is None:
        return parsed
    stored = await store.get(options.previous_response_id)
    if stored is None:
        raise PreviousResponseNotFound(
            f"Previous response with id '{options.previous_response_id}' not found.", param="previous_response_id"
        )
    history = (*stored["input_items"], *stored["response"]["output"])
    request = replace(
        parsed.request,
        model=parsed.request.model or stored["response"]["model"],
        messages=messages(options.instructions, (*history, *options.input_items), first=len(history)),
    )
    return replace(parsed, request=request, options=replace(options, history=history))


async def record(parsed: Parsed[ChatRequest, ResponsesOptions], response: Any, store: StateStore) -> None:
    """Keeps a finished response (unless `store` is false) with its conversation, every item with an id."""
    options = parsed.options
    if not options.store or not isinstance(response, dict):
        return
    key: str = response["id"]
    tag = key.removeprefix("resp_")
    items = [
        item if "id" in item else {"id": f"{_ID_PREFIX[item['type']]}_{tag}_in{i}", **item}
        for i, item in enumerate((*options.history, *options.input_items))
    ]
    await store.put(key, {"response": response, "input_items": items})


ROUTES = (
    GenerateRoute(
        path="/responses",
        parse=parse,
        render=render,
        encoder=encoder,
        resolve=resolve,
        record=record,
        body=ResponsesBody,
        detached=Detached(encoder=encoder, frames=frames),
    ),
    CountRoute(path="/responses/input_tokens", parse=parse_count, render=render_count, resolve=resolve, body=CountBody),
    StateRoute(path="/responses/{response_id}/input_items", handle=input_items),
    StateRoute(path="/responses/{response_id}", handle=retrieve),
    StateRoute(path="/responses/{response_id}", handle=delete, methods=("DELETE",)),
    StateRoute(path="/responses/{response_id}/cancel", handle=cancel, methods=("POST",)),
)
