"""Forced tool calls: the schema they are decoded under, and decoded text turned into call events."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest

from asgi_llm.core import (
    Finish,
    InternalError,
    InvalidRequest,
    Message,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    ToolSpec,
    Unsupported,
    Usage,
)
from asgi_llm.engines.decoding.forms import Choice, Closed, Items, values_of
from asgi_llm.engines.decoding.schema_gbnf import schema_gbnf
from asgi_llm.engines.decoding.tool_calls import (
    MAX_PARALLEL_CALLS,
    JsonValues,
    forced_calls,
    plan_calls,
    with_tools_note,
)

WEATHER = ToolSpec(
    "get_weather",
    "Weather in a city",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
CLOCK = ToolSpec("get_time", None, {})
TOOLS = (WEATHER, CLOCK)


def ids() -> Callable[[], str]:
    counter = itertools.count()
    return lambda: f"call_{next(counter)}"


def stop() -> Finish:
    return Finish("stop", Usage(5, 7))


def test_a_named_tool_is_one_object_with_its_name_fixed() -> None:
    plan = plan_calls(TOOLS, "get_weather", parallel=True)
    assert not plan.parallel and set(plan.checks) == {"get_weather"}
    call = plan.form.root
    assert isinstance(call, Closed) and call.declared["name"] == values_of(["get_weather"])
    arguments = call.declared["arguments"]
    assert isinstance(arguments, Closed) and arguments.required == ("city",)
    assert call.required == ("name", "arguments")
    schema_gbnf(plan.form)


def test_required_is_any_tool_and_a_tool_without_parameters_takes_none() -> None:
    plan = plan_calls(TOOLS, "required", parallel=False)
    assert isinstance(plan.form.root, Choice)
    calls = [option for option in plan.form.root.options if isinstance(option, Closed)]
    assert [call.declared["name"] for call in calls] == [values_of(["get_weather"]), values_of(["get_time"])]
    assert calls[1].declared["arguments"] == Closed(())
    schema_gbnf(plan.form)


def test_parallel_required_calls_are_a_bounded_array() -> None:
    plan = plan_calls(TOOLS, "required", parallel=True)
    assert plan.parallel
    assert isinstance(plan.form.root, Items)
    assert (plan.form.root.least, plan.form.root.most) == (1, MAX_PARALLEL_CALLS)
    schema_gbnf(plan.form)


def test_a_tool_schema_decoding_cannot_enforce_is_a_400_naming_tools() -> None:
    bad = ToolSpec("count", None, {"type": "object", "properties": {"n": {"type": "array", "uniqueItems": True}}})
    with pytest.raises(Unsupported, match="uniqueItems") as caught:
        plan_calls((WEATHER, bad), "required", parallel=False)
    assert caught.value.param == "tools[1]"


def test_a_tool_name_the_grammar_cannot_spell_is_a_400() -> None:
    with pytest.raises(Unsupported) as caught:
        plan_calls((WEATHER, ToolSpec('say "hi"', None, {})), "required", parallel=False)
    assert caught.value.param == "tools[1]"


def test_json_values_finds_whole_values_at_its_level_across_pieces() -> None:
    top = JsonValues(0)
    assert top.feed('{"a": "}{", "b": [1, {') == []
    assert top.feed("}]} ") == ['{"a": "}{", "b": [1, {}]}']
    elements = JsonValues(1)
    pieces = ['[{"s": "\\"]"}', ', {"t', '": 2}', "]"]
    assert [v for piece in pieces for v in elements.feed(piece)] == ['{"s": "\\"]"}', '{"t": 2}']


def test_forced_call_text_becomes_call_events_and_the_reason_tool_calls() -> None:
    plan = plan_calls(TOOLS, "get_weather", parallel=False)
    text = ['{ "name": "get_weather", "arg', 'uments": { "city": "Paris" } }']
    events = list(forced_calls([None, *(TextDelta(t) for t in text), stop()], plan, ids()))
    assert events == [
        None,
        ToolCallStart("call_0", "get_weather"),
        ToolCallDelta('{ "city": "Paris" }'),  # the model's own text of the arguments
        ToolCallEnd(),
        Finish("tool_calls", Usage(5, 7)),
    ]


def test_parallel_calls_leave_one_by_one_as_each_completes() -> None:
    plan = plan_calls(TOOLS, "required", parallel=True)
    first = '[{"name": "get_time", "arguments": {}}'
    second = ', {"name": "get_weather", "arguments": {"city": "Oslo"}}]'
    events = list(forced_calls([TextDelta(first, index=2), TextDelta(second, index=2), stop()], plan, ids()))
    starts = [e for e in events if isinstance(e, ToolCallStart)]
    assert [(s.name, s.call_index, s.index) for s in starts] == [("get_time", 0, 2), ("get_weather", 1, 2)]
    assert [e.arguments for e in events if isinstance(e, ToolCallDelta)] == ["{}", '{"city": "Oslo"}']
    assert events.index(starts[1]) > events.index(ToolCallEnd(index=2, call_index=0))


def test_a_call_cut_off_by_the_token_limit_is_not_sent() -> None:
    plan = plan_calls(TOOLS, "required", parallel=False)
    cut = Finish("length", Usage(5, 8))
    assert list(forced_calls([TextDelta('{"name": "get_wea'), cut], plan, ids())) == [cut]


@pytest.mark.parametrize(
    "text",
    [
        pytest.param('{"name": "get_weather", "arguments": {"town": "Paris"}}', id="arguments-off-schema"),
        pytest.param('{"name": "launch", "arguments": {}}', id="unknown-tool"),
        pytest.param('{"name": "get_time"}', id="no-arguments"),
        pytest.param('{"name": "get_time", "arguments": {"x": 1e999}}', id="infinity"),
    ],
)
def test_a_call_off_its_schema_is_an_internal_error(text: str) -> None:
    plan = plan_calls(TOOLS, "required", parallel=False)
    with pytest.raises(InternalError):
        list(forced_calls([TextDelta(text), stop()], plan, ids()))


def test_stopping_before_any_call_is_an_internal_error() -> None:
    plan = plan_calls(TOOLS, "required", parallel=False)
    with pytest.raises(InternalError):
        list(forced_calls([TextDelta("{"), stop()], plan, ids()))


def test_the_tools_note_joins_the_system_message_or_leads() -> None:
    user = Message("user", "hi")
    alone = with_tools_note([user], TOOLS)
    assert alone[0].role == "system" and alone[1] == user
    assert '"name": "get_weather"' in alone[0].content and '"arguments"' in alone[0].content
    joined = with_tools_note([Message("system", "Be brief."), user], TOOLS)
    assert len(joined) == 2 and joined[0].content.startswith("Be brief.\n\nYou can call these tools:")


def test_the_tools_note_writes_earlier_calls_as_the_text_it_asks_for() -> None:
    """A template with no place for tools would drop an earlier turn's calls: they become its text."""
    one = Message("assistant", "", tool_calls=(ToolCall("call_1", "get_weather", '{"city": "Oslo"}'),))
    two = Message(
        "assistant", "Both:", tool_calls=(ToolCall("call_2", "get_time", "{}"), ToolCall("call_3", "get_time", "{}"))
    )
    answer = Message("tool", "3 degrees", tool_call_id="call_1")
    _, first, result, second = with_tools_note([one, answer, two], TOOLS)
    assert first == Message("assistant", '{"name": "get_weather", "arguments": {"city": "Oslo"}}')
    assert result == answer
    assert second.content == 'Both:\n[{"name": "get_time", "arguments": {}}, {"name": "get_time", "arguments": {}}]'
    assert second.tool_calls == ()


def test_a_call_repeating_an_earlier_one_is_not_sent_again_nor_any_after_it() -> None:
    plan = plan_calls(TOOLS, "required", parallel=True)
    text = '[{"name": "get_time", "arguments": {}}, {"name":"get_time","arguments":{ }}, {"name": "get_weather", '
    text += '"arguments": {"city": "Rome"}}]'
    events = list(forced_calls([TextDelta(text), stop()], plan, ids()))
    starts = [e for e in events if isinstance(e, ToolCallStart)]
    assert [(s.name, s.call_index) for s in starts] == [("get_time", 0)]
    assert events[-1] == Finish("tool_calls", Usage(5, 7))


def _tool(name: str, parameters: dict[str, Any]) -> ToolSpec:
    return ToolSpec(name, "", parameters)


def test_a_tool_no_call_can_satisfy_is_not_offered_and_an_optional_impossible_argument_is_left_out() -> None:
    impossible = {"type": "object", "properties": {"n": {"type": "integer", "enum": ["a"]}}, "required": ["n"]}
    optional = {"type": "object", "properties": {"metrics": {"type": "integer", "enum": ["a", "b"]}, "q": {}}}
    plan = plan_calls([_tool("broken", impossible), _tool("fine", optional)], "required", parallel=False)
    assert "broken" not in plan.checks and "fine" in plan.checks
    text = repr(plan.form)
    assert "broken" not in text and "metrics" not in text
    with pytest.raises(InvalidRequest, match="No value") as caught:
        plan_calls([_tool("broken", impossible), _tool("fine", optional)], "broken", parallel=False)
    assert caught.value.param == "tools[0]"
    with pytest.raises(InvalidRequest, match="No value"):
        plan_calls([_tool("broken", impossible)], "required", parallel=False)
