"""What constrains a request's decoding, decided before any token: pure, no `llama_cpp` here.

A forced tool call and structured output are each decoded under a JSON schema (turned into
a grammar by the engine); the decoded events then pass through a check of the document, or
become tool-call events. With `tool_choice: auto` the model decodes freely until it begins a
call, and only the call is held to a grammar (`LazyCalls`); its text is searched for calls.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace

from jsonschema.protocols import Validator  # type: ignore[import-untyped, unused-ignore]

from ...core.errors import InvalidRequest
from ...core.events import GenerationEvent
from ...core.requests import ChatRequest, GenerationRequest, SamplingParams
from .client_grammar import client_grammar, in_grammar
from .grammar import Schema, checked_output, output_schema, validator
from .tool_calls import forced_calls, plan_calls
from .tool_detect import detected_calls

__all__ = ["Constraint", "LazyCalls", "constraint_for", "forces_call", "new_call_id", "offers_tools"]

Events = Iterable[GenerationEvent | None]
Wrap = Callable[[Events], Iterator[GenerationEvent | None]]


@dataclass(frozen=True)
class LazyCalls:
    """A call begun in free text is finished under `schema` (one call object); `checks` find calls."""

    schema: Schema | None
    checks: Mapping[str, Validator]
    parallel: bool


@dataclass(frozen=True)
class Constraint:
    """Decode with `sampling`, under `schema` or a client's own grammar `gbnf` if one is given
    (`param` names it in errors), calls begun in free text under `lazy`, and send each choice's
    events through `wrap`. `distinct` is the JSON nesting level of values (calls) that must not
    repeat: a repeat ends the output."""

    sampling: SamplingParams
    schema: Schema | None = None
    param: str = ""
    wrap: Wrap = iter
    lazy: LazyCalls | None = None
    distinct: int | None = None
    gbnf: str | None = None

    @property
    def held(self) -> bool:
        """Whether a grammar holds the whole output."""
        return self.schema is not None or self.gbnf is not None


def forces_call(request: GenerationRequest) -> bool:
    return isinstance(request, ChatRequest) and bool(request.tools) and request.tool_choice not in ("auto", "none")


def offers_tools(request: GenerationRequest) -> bool:
    """Whether the model may call a tool: the prompt should tell it about them."""
    return isinstance(request, ChatRequest) and bool(request.tools) and request.tool_choice != "none"


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def constraint_for(request: GenerationRequest, new_id: Callable[[], str] = new_call_id) -> Constraint:
    """A forced call wins over structured output (its reply has no text for a format to shape),
    and structured output over `auto` tools (the format is promised; a call is only allowed).

    Raises `InvalidRequest` / `Unsupported` for schemas that are invalid or cannot be enforced.
    """
    sampling = request.sampling
    if isinstance(request, ChatRequest) and forces_call(request):
        calls = plan_calls(request.tools, request.tool_choice, request.parallel_tool_calls)
        # The call's JSON must not be cut by a stop sequence; a call has no logprobs to report.
        sampling = replace(sampling, stop=(), logprobs=False, top_logprobs=0, output_format=None)
        wrap: Wrap = lambda events: forced_calls(events, calls, new_id)
        return Constraint(sampling, calls.schema, "tools", wrap, distinct=1 if calls.parallel else None)
    fmt = sampling.output_format
    if fmt is not None and fmt.kind == "grammar":
        shape = client_grammar(fmt.grammar, fmt.param)
        return Constraint(sampling, param=fmt.param, wrap=lambda events: in_grammar(events, shape), gbnf=fmt.grammar)
    if fmt is not None:
        schema, check = output_schema(fmt)
        return Constraint(sampling, schema, fmt.param, lambda events: checked_output(events, check))
    if isinstance(request, ChatRequest) and offers_tools(request):
        lazy = _lazy_calls(request)
        detect: Wrap = lambda events: detected_calls(events, lazy.checks, new_id, parallel=lazy.parallel)
        return Constraint(sampling, wrap=detect, lazy=lazy)
    return Constraint(sampling)


def _lazy_calls(request: ChatRequest) -> LazyCalls:
    """What `auto` needs. Tool schemas are not refused here: one decoding cannot enforce leaves
    calls unconstrained (`schema` None), and a call whose arguments do not validate stays text."""
    checks = {tool.name: validator(tool.parameters) for tool in request.tools}
    try:
        plan = plan_calls(request.tools, "required", parallel=False, keys=("arguments", "parameters"))
    except InvalidRequest:
        return LazyCalls(None, checks, request.parallel_tool_calls)
    return LazyCalls(plan.schema, checks, request.parallel_tool_calls)
