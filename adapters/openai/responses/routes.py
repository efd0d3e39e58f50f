"""OpenAI Responses: `POST /responses` (stateful through `previous_response_id`), retrieve,
delete and `input_items` of stored responses, and `POST /responses/input_tokens`.

A stored response keeps its whole conversation as normalized items (`input_items`: every
earlier turn's input and output, then its own input), so chaining on it is one lookup.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

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
from ...json_output import checked_name, json_object, json_schema, tool_names, tool_parameters
from ..chat_messages import format_note
from ..common import effort_reasoning, served_user
from .body import (
    HANDLED,
    LOGPROBS,
    Body,
    CountBody,
    FunctionTool,
    ResponsesBody,
    TextFormat,
    refuse_generation,
    refuse_unsupported,
)
from .input import Item, check_pairs, messages, normalize_input, validate_at
from .output import Output, ResponsesStream, finished, frames
from .sealed import INCLUDE
from .stored import ResponseNotFound, cancel, delete, input_items, retrieve

__all__ = [
    "ROUTES",
    "CountBody",
    "PreviousResponseNotFound",
    "ResponseNotFound",
    "ResponsesBody",
    "ResponsesOptions",
    "encoder",
    "parse",
    "parse_count",
    "record",
    "render",
    "render_count",
    "resolve",
]

_ID_PREFIX = {"message": "msg", "function_call": "fc", "function_call_output": "fco", "reasoning": "rs"}


class PreviousResponseNotFound(LLMError):
    status = 404
    code = "previous_response_not_found"


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
    sealed: bool = False
    """Reasoning items carry `encrypted_content` (`include`; sealed.py)."""


def parse(body: Any) -> Parsed[ChatRequest, ResponsesOptions]:
    wire = validate(ResponsesBody, body)
    refuse_generation(wire)
    return _parse(wire, wire, HANDLED)


def parse_count(body: Any) -> Parsed[ChatRequest, ResponsesOptions]:
    wire = validate(CountBody, body)
    if wire.model is None and wire.previous_response_id is None:
        raise InvalidRequest("Missing required parameter: 'model'.", param="model")
    return _parse(wire, ResponsesBody.model_construct(model=wire.model or ""), ("conversation",))


def _parse(wire: Body, gen: ResponsesBody, handled: tuple[str, ...]) -> Parsed[ChatRequest, ResponsesOptions]:
    """`wire` is the body; `gen` holds what only generating reads (the body itself, or for a
    count every such field unset); `handled`, the extras checked with words of their own."""
    refuse_unsupported(wire)
    refuse_unrecognized(wire, handled=handled)
    items = normalize_input(wire.input)
    fmt = wire.text.format if wire.text is not None else None
    note = format_note(fmt.name or "", fmt.description) if fmt is not None and fmt.type == "json_schema" else None
    instructions = "\n\n".join(text for text in (wire.instructions, note) if text) or None  # the format's, told
    if not items and wire.instructions is None and wire.previous_response_id is None:
        raise InvalidRequest("Missing required parameter: 'input'.", param="input")
    if wire.previous_response_id is None:
        check_pairs((), items)  # else `resolve` does, with the stored conversation
    tools, specs = _tools(wire.tools)
    sampling = SamplingParams(
        max_tokens=gen.max_output_tokens,
        max_tokens_param="max_output_tokens",
        temperature=1.0 if gen.temperature is None else gen.temperature,
        top_p=1.0 if gen.top_p is None else gen.top_p,
        logprobs=LOGPROBS in (gen.include or ()) or bool(gen.top_logprobs),
        top_logprobs=gen.top_logprobs or 0,
        output_format=_output_format(wire.text.format if wire.text else None),
        speculative=gen.speculative is not False,
    )
    request = ChatRequest(
        model=gen.model,
        messages=messages(instructions, items),
        sampling=sampling,
        user=served_user(gen.user, gen.safety_identifier),
        tools=specs,
        tool_choice=_tool_choice(wire.tool_choice, {s.name for s in specs}),
        parallel_tool_calls=wire.parallel_tool_calls is not False and gen.max_tool_calls != 1,
        reasoning=effort_reasoning(wire.reasoning.effort if wire.reasoning else None, "reasoning.effort"),
        prompt_param="input",
    )
    store = gen.store is not False
    echo, sealed = _echo(wire, gen, tools, sampling), INCLUDE in (gen.include or ())
    options = ResponsesOptions(instructions, tuple(items), echo, store, wire.previous_response_id, sealed=sealed)
    return Parsed(request, options, stream=bool(gen.stream), background=bool(gen.background))


def _output_format(fmt: TextFormat | None) -> OutputFormat | None:
    if fmt is not None and fmt.type != "json_schema":
        own = (("name", fmt.name), ("description", fmt.description), ("schema", fmt.schema_), ("strict", fmt.strict))
        for field, value in own:
            if value is not None:  # a json_schema's own, which another type would drop
                param = f"text.format.{field}"
                raise InvalidRequest(f"'{param}' is only for the type 'json_schema', not '{fmt.type}'.", param=param)
    if fmt is None or fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return json_object("text.format")
    for field in ("name", "schema_"):
        if getattr(fmt, field) is None:
            param = f"text.format.{field.rstrip('_')}"
            raise InvalidRequest(f"Missing required parameter: '{param}'.", param=param)
    name = checked_name(fmt.name or "", "text.format.name")
    return json_schema(fmt.schema_, "text.format.schema", name=name, strict=fmt.strict)


def _format_echo(fmt: TextFormat | None) -> dict[str, Any]:
    """`text.format` as the response object reports it."""
    if fmt is None or fmt.type != "json_schema":
        return {"type": fmt.type if fmt else "text"}
    echo = {"type": "json_schema", "name": fmt.name, "schema": fmt.schema_, "strict": fmt.strict}
    return echo if fmt.description is None else {**echo, "description": fmt.description}


def _tools(raw: list[Any] | None) -> tuple[list[dict[str, Any]], tuple[ToolSpec, ...]]:
    echo, specs = [], []
    for i, entry in enumerate(raw or ()):
        kind = entry.get("type") if isinstance(entry, dict) else None
        if kind not in (None, "function"):
            raise Unsupported(
                f"Tools of type '{kind}' are not supported; use function tools.", param=f"tools[{i}].type"
            )
        tool = validate_at(FunctionTool, entry, f"tools[{i}]")
        if tool.defer_loading:
            param = f"tools[{i}].defer_loading"
            raise Unsupported("Deferred tool loading is not supported: every tool is in the prompt.", param=param)
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
    tool_names([spec.name for spec in specs], lambda i: f"tools[{i}].name")
    return echo, tuple(specs)


def _tool_choice(raw: str | dict[str, Any] | None, names: set[str]) -> ToolChoice:
    if raw is None:
        return "auto"
    if raw == "required" and not names:
        raise InvalidRequest("'tool_choice' is 'required', but no tools are given.", param="tool_choice")
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


def _echo(wire: Body, gen: ResponsesBody, tools: list[dict[str, Any]], sampling: SamplingParams) -> dict[str, Any]:
    """The request's settings as the response object reports them (defaults filled in;
    `text.verbosity` and `reasoning.summary` as sent, what is not refused of them)."""
    choice, text, thinking = wire.tool_choice, wire.text, wire.reasoning
    echo: dict[str, Any] = {
        "instructions": wire.instructions,
        "max_output_tokens": gen.max_output_tokens,
        "max_tool_calls": gen.max_tool_calls,
        "parallel_tool_calls": wire.parallel_tool_calls is not False,
        "previous_response_id": wire.previous_response_id,
        "background": bool(gen.background),
        "reasoning": {
            "effort": thinking.effort if thinking else None,
            "summary": thinking.summary if thinking else None,
        },
        "store": gen.store is not False,
        "temperature": sampling.temperature,
        "text": {"format": _format_echo(text.format if text else None)},
        "tool_choice": {"type": "function", "name": choice["name"]} if isinstance(choice, dict) else choice or "auto",
        "tools": tools,
        "top_logprobs": sampling.top_logprobs,
        "top_p": sampling.top_p,
        "truncation": "disabled",
        "metadata": gen.metadata or {},
    }
    if text is not None and text.verbosity is not None:
        echo["text"]["verbosity"] = text.verbosity
    return {**echo, **_sent_echo(gen)}


def _sent_echo(gen: ResponsesBody) -> dict[str, Any]:
    """The settings the response object reports only when they were sent."""
    sent = {
        "user": gen.user,
        "safety_identifier": gen.safety_identifier,
        "prompt_cache_retention": gen.prompt_cache_retention,
    }
    if gen.service_tier is not None:
        sent["service_tier"] = "default"  # the tier that served it, as OpenAI reports `auto`
    return {name: value for name, value in sent.items() if value is not None}


def render(
    parsed: Parsed[ChatRequest, ResponsesOptions], meta: Meta, events: Sequence[GenerationEvent]
) -> dict[str, Any]:
    out = Output(meta.request_id, sealed=parsed.options.sealed)
    for event in events:
        out.feed(event)
    return finished(meta, parsed.options.echo, out)


def encoder(parsed: Parsed[ChatRequest, ResponsesOptions], meta: Meta) -> ResponsesStream:
    return ResponsesStream(parsed.options.echo, meta, keep=parsed.background, sealed=parsed.options.sealed)


def render_count(parsed: Parsed[ChatRequest, ResponsesOptions], count: int) -> dict[str, Any]:
    return {"object": "response.input_tokens", "input_tokens": count}


async def resolve(
    parsed: Parsed[ChatRequest, ResponsesOptions], store: StateStore
) -> Parsed[ChatRequest, ResponsesOptions]:
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
    status = stored["response"].get("status")
    if status in ("queued", "in_progress"):
        raise InvalidRequest(
            f"Previous response with id '{options.previous_response_id}' is still {status.replace('_', ' ')}; "
            "chain on it once it has finished.",
            param="previous_response_id",
        )
    history = (*stored["input_items"], *stored["response"]["output"])
    check_pairs(history, options.input_items)
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
