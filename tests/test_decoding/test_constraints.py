"""What constrains decoding, per request: a forced call wins over a format; `none` and `auto` add nothing."""

from __future__ import annotations

import pytest

from asgi_llm.core import (
    ChatRequest,
    CompletionRequest,
    Finish,
    Message,
    OutputFormat,
    SamplingParams,
    TextDelta,
    ToolCallStart,
    ToolSpec,
    Unsupported,
    Usage,
)
from asgi_llm.engines.decoding.constraints import constraint_for, forces_call, offers_tools
from asgi_llm.engines.decoding.forms import Choice, Closed, Plain, Rewritten, values_of

TOOL = ToolSpec("f", None, {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]})
JSON = OutputFormat("json_object", "response_format")
HI = (Message("user", "hi"),)


def chat(**fields: object) -> ChatRequest:
    return ChatRequest("m", HI, **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize("choice", ["auto", "none"])
def test_auto_and_none_decode_freely(choice: str) -> None:
    request = chat(tools=(TOOL,), tool_choice=choice)
    constraint = constraint_for(request)
    assert not forces_call(request) and constraint.form is None and constraint.sampling == request.sampling
    assert offers_tools(request) is (choice == "auto")
    events = [TextDelta("{}"), Finish("stop", Usage(1, 1))]
    assert list(constraint.wrap(events)) == events


def test_auto_finds_calls_in_text_and_holds_a_begun_call_to_a_grammar() -> None:
    constraint = constraint_for(chat(tools=(TOOL,), parallel_tool_calls=False), new_id=lambda: "call_1")
    lazy = constraint.lazy
    assert lazy is not None and not lazy.parallel and set(lazy.checks) == {"f"}
    assert lazy.form is not None and isinstance(lazy.form.root, Choice)
    keys = [set(option.declared) for option in lazy.form.root.options if isinstance(option, Closed)]
    assert keys == [{"name", "arguments"}, {"name", "parameters"}]
    events = list(constraint.wrap([TextDelta('{"name": "f", "parameters": {"x": 2}}'), Finish("stop", Usage(1, 9))]))
    assert events[0] == ToolCallStart("call_1", "f") and events[-1] == Finish("tool_calls", Usage(1, 9))


def test_auto_with_a_tool_decoding_cannot_enforce_still_finds_calls() -> None:
    loose = ToolSpec("g", None, {"type": "object", "properties": {"n": {"type": "array", "uniqueItems": True}}})
    lazy = constraint_for(chat(tools=(loose,))).lazy
    assert lazy is not None and lazy.form is None and set(lazy.checks) == {"g"}


def test_a_format_wins_over_auto_tools() -> None:
    constraint = constraint_for(chat(tools=(TOOL,), sampling=SamplingParams(output_format=JSON)))
    assert constraint.form == Rewritten(Plain("object")) and constraint.lazy is None


def test_a_forced_call_wins_over_a_format_and_drops_stops_and_logprobs() -> None:
    sampling = SamplingParams(stop=("}",), logprobs=True, top_logprobs=2, output_format=JSON)
    request = chat(tools=(TOOL,), tool_choice="f", sampling=sampling)
    constraint = constraint_for(request, new_id=lambda: "call_1")
    assert forces_call(request) and constraint.param == "tools"
    assert constraint.sampling == SamplingParams()
    assert constraint.form is not None and isinstance(constraint.form.root, Closed)
    assert constraint.form.root.declared["name"] == values_of(["f"])
    events = list(constraint.wrap([TextDelta('{"name": "f", "arguments": {"x": 1}}'), Finish("stop", Usage(1, 9))]))
    assert events[0] == ToolCallStart("call_1", "f") and events[-1] == Finish("tool_calls", Usage(1, 9))


def test_required_without_tools_decodes_freely() -> None:
    assert constraint_for(chat(tool_choice="required")).form is None


def test_structured_output_applies_to_raw_completions_too() -> None:
    request = CompletionRequest("m", ("{",), sampling=SamplingParams(output_format=JSON))
    constraint = constraint_for(request)
    assert (constraint.form, constraint.param) == (Rewritten(Plain("object")), "response_format")


def test_unenforceable_formats_fail_before_decoding() -> None:
    fmt = OutputFormat("json_schema", "format", {"type": "string", "pattern": "(?!x)"})
    with pytest.raises(Unsupported) as caught:
        constraint_for(chat(sampling=SamplingParams(output_format=fmt)))
    assert caught.value.param == "format"
