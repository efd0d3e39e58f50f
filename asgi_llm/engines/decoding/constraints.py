"""What constrains a request's decoding, decided before any token: pure, no `llama_cpp` here.

A forced tool call and structured output are each decoded under a JSON schema, compiled here
into a grammar (through the engine's `Grammars`, which keeps what it compiled); the decoded events
then pass through a check of the document, or become tool-call events. With `tool_choice: auto`
the model decodes freely until it begins a call, and only the call is held to a grammar
(`LazyCalls`); its text is searched for calls. The compile is pure Python and may take seconds:
the engine runs `constraint_for` on a worker thread, and the inference thread only hands the
ready grammar to llama.cpp.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace

from ...core.errors import InvalidRequest, Unsupported
from ...core.events import GenerationEvent
from ...core.requests import ChatRequest, GenerationRequest, OutputFormat, SamplingParams
from .checks import Validator
from .client_grammar import in_grammar
from .compiled import CompiledGrammar, Enforced, Grammars
from .forms import Plain, Rewritten
from .gbnf import Grammar
from .grammar import checked_output, validator
from .tool_calls import forced_calls, plan_calls
from .tool_detect import detected_calls, trigger_grammars

__all__ = [
    "Constraint",
    "Held",
    "LazyCalls",
    "compiles",
    "constraint_for",
    "forces_call",
    "new_call_id",
    "offers_tools",
]

ANY_OBJECT = Rewritten(Plain("object"))
Events = Iterable[GenerationEvent | None]
Wrap = Callable[[Events], Iterator[GenerationEvent | None]]
Held = Callable[[], bool]
"""Whether decoding holds a call begun in free text to its grammar, with room to finish it."""
Watch = Callable[[Events, Held], Iterator[GenerationEvent | None]]


@dataclass(frozen=True)
class LazyCalls:
    """A call begun in free text is finished under `form` (one call object), compiled into
    `grammar`; `shapes` are the grammars `tool_detect.trigger_grammar` may make of it, read for the
    closing watch, by their text. `checks` find calls."""

    form: Rewritten | None
    checks: Mapping[str, Validator]
    parallel: bool
    grammar: CompiledGrammar | None = None
    shapes: Mapping[str, Grammar | None] = field(default_factory=dict)


@dataclass(frozen=True)
class Constraint:
    """Decode with `sampling`, under `grammar` if one is given (compiled from `form`, or a
    client's own; `param` names it in errors), calls begun in free text under `lazy`, and send
    each choice's events through `wrap` (with `auto` calls, `watch`: see `wrap_for`). `distinct`
    is the JSON nesting level of values (calls) that must not repeat: a repeat ends the output."""

    sampling: SamplingParams
    form: Rewritten | None = None
    param: str = ""
    wrap: Wrap = iter
    lazy: LazyCalls | None = None
    distinct: int | None = None
    grammar: CompiledGrammar | None = None
    watch: Watch | None = None

    def wrap_for(self, held: Held) -> Wrap:
        """The wrap of one choice whose decoding tells, through `held`, whether it holds a call
        begun in free text to its grammar: such calls stream as they are decoded."""
        watch = self.watch
        return self.wrap if watch is None else lambda events: watch(events, held)

    @property
    def held(self) -> bool:
        """Whether a grammar holds the whole output."""
        return self.grammar is not None


def forces_call(request: GenerationRequest) -> bool:
    return isinstance(request, ChatRequest) and bool(request.tools) and request.tool_choice not in ("auto", "none")


def offers_tools(request: GenerationRequest) -> bool:
    """Whether the model may call a tool: the prompt should tell it about them."""
    return isinstance(request, ChatRequest) and bool(request.tools) and request.tool_choice != "none"


def compiles(request: GenerationRequest) -> bool:
    """Whether `constraint_for` has a schema or a grammar to compile for `request` (else it takes no time)."""
    return request.sampling.output_format is not None or offers_tools(request)


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def constraint_for(
    request: GenerationRequest, new_id: Callable[[], str] = new_call_id, grammars: Grammars | None = None
) -> Constraint:
    """A forced call wins over structured output (its reply has no text for a format to shape),
    and structured output over `auto` tools (the format is promised; a call is only allowed).
    Grammars are compiled through `grammars` (the engine's, which keeps them), or anew.

    Raises `InvalidRequest` / `Unsupported` for schemas that are invalid or cannot be enforced.
    """
    sampling = request.sampling
    grammars = grammars if grammars is not None else Grammars(entries=0)
    begun = request.prefill if isinstance(request, ChatRequest) else None
    if isinstance(request, ChatRequest) and forces_call(request):
        if begun:
            raise InvalidRequest(
                "The assistant's last message is a prefill the reply must continue, and a forced tool call "
                "has no text to continue: drop the prefill or let the model choose ('tool_choice': 'auto').",
                param=request.prompt_param,
            )
        calls = plan_calls(request.tools, request.tool_choice, request.parallel_tool_calls, grammars=grammars)
        # The call's JSON must not be cut by a stop sequence; a call has no logprobs to report.
        sampling = replace(sampling, stop=(), logprobs=False, top_logprobs=0, output_format=None)
        wrap: Wrap = lambda events: forced_calls(events, calls, new_id)
        grammar = grammars.schema_grammar(calls.form, "tools")
        return Constraint(sampling, calls.form, "tools", wrap, distinct=1 if calls.parallel else None, grammar=grammar)
    fmt = sampling.output_format
    if fmt is not None and fmt.kind == "grammar":
        own = grammars.own_grammar(fmt.grammar, fmt.param)
        shape = own.shape
        assert shape is not None  # a client's grammar is read, or refused
        return Constraint(
            sampling, param=fmt.param, wrap=lambda events: in_grammar(events, shape, begun or ""), grammar=own
        )
    if fmt is not None:
        enforced = _output(fmt, grammars)
        grammar = grammars.schema_grammar(enforced.form, fmt.param)
        checked: Wrap = lambda events: checked_output(events, enforced.check, begun or "")
        return Constraint(sampling, enforced.form, fmt.param, checked, grammar=grammar)
    if isinstance(request, ChatRequest) and offers_tools(request):
        lazy = _lazy_calls(request, grammars)

        def watch(events: Events, held: Held = lambda: False) -> Iterator[GenerationEvent | None]:
            return detected_calls(events, lazy.checks, new_id, parallel=lazy.parallel, held=held)

        return Constraint(sampling, wrap=watch, lazy=lazy, watch=watch)
    return Constraint(sampling)


def _output(fmt: OutputFormat, grammars: Grammars) -> Enforced:
    """The schema the output is decoded under, and the check it must pass when done."""
    if fmt.kind == "json_object":
        return Enforced(ANY_OBJECT, validator({"type": "object"}))
    return grammars.enforced(fmt.schema, fmt.param)


def _lazy_calls(request: ChatRequest, grammars: Grammars) -> LazyCalls:
    """What `auto` needs. Tool schemas are not refused here: one decoding cannot enforce leaves
    calls unconstrained (`form` None), and a call whose arguments do not validate stays text."""
    checks = {tool.name: validator(tool.parameters) for tool in request.tools}
    parallel = request.parallel_tool_calls
    try:
        plan = plan_calls(
            request.tools, "required", parallel=False, keys=("arguments", "parameters"), grammars=grammars
        )
    except InvalidRequest:
        return LazyCalls(None, checks, parallel)
    try:
        grammar = grammars.schema_grammar(plan.form, "tools")
    except Unsupported:
        return LazyCalls(plan.form, checks, parallel)
    shapes = {text: grammars.shape(text) for text in trigger_grammars(grammar.gbnf, parallel)}
    return LazyCalls(plan.form, checks, parallel, grammar, shapes)
