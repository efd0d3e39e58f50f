"""A forced call's arguments stream as they are decoded, and their pieces are the final arguments."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Sequence

import pytest

from asgi_llm.core import (
    Finish,
    GenerationEvent,
    InternalError,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    ToolSpec,
    Usage,
)
from asgi_llm.engines.decoding.call_stream import CallBegun, CallDone, CallScanner, CallText
from asgi_llm.engines.decoding.tool_calls import forced_calls, plan_calls

SEARCH = ToolSpec(
    "search",
    "Search the web",
    {
        "type": "object",
        "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}, "tags": {"type": "array"}},
        "required": ["query"],
    },
)
CLOCK = ToolSpec("get_time", None, {})
TOOLS = (SEARCH, CLOCK)


def ids() -> Callable[[], str]:
    counter = itertools.count()
    return lambda: f"call_{next(counter)}"


def tokens(text: str, size: int = 3) -> list[TextDelta]:
    """`text` as the small pieces a model decodes it in."""
    return [TextDelta(text[i : i + size]) for i in range(0, len(text), size)]


def run(text: str, parallel: bool, finish: Finish | None = None) -> list[GenerationEvent | None]:
    plan = plan_calls(TOOLS, "required", parallel=parallel)
    return list(forced_calls([*tokens(text), finish or Finish("stop", Usage(5, 7))], plan, ids()))


def arguments_of(events: Sequence[GenerationEvent | None], call_index: int) -> list[str]:
    return [e.arguments for e in events if isinstance(e, ToolCallDelta) and e.call_index == call_index]


def test_a_call_starts_once_its_arguments_begin_and_they_stream_in_many_pieces() -> None:
    arguments = '{"query": "weather in \\"Paris\\" {today}", "limit": 5, "tags": ["a", "b}"]}'
    events = run('{"name": "search", "arguments": ' + arguments + "}", parallel=False)
    pieces = arguments_of(events, 0)
    assert len(pieces) > 5
    assert "".join(pieces) == arguments
    assert json.loads("".join(pieces))["tags"] == ["a", "b}"]
    assert isinstance(events[0], ToolCallStart) and events[0].name == "search" and events[0].id == "call_0"
    assert events[-2:] == [ToolCallEnd(), Finish("tool_calls", Usage(5, 7))]


def test_the_arguments_stream_before_the_call_completes() -> None:
    plan = plan_calls(TOOLS, "required", parallel=False)
    stream = forced_calls(
        iter([TextDelta('{"name": "search", "arguments": {"que'), TextDelta('ry": "x"}}')]), plan, ids()
    )
    assert next(stream) == ToolCallStart("call_0", "search")
    assert next(stream) == ToolCallDelta('{"que')
    assert next(stream) == ToolCallDelta('ry": "x"}')
    assert next(stream) == ToolCallEnd()


def test_the_pieces_are_the_models_own_text_whitespace_and_escapes_kept() -> None:
    arguments = '{ "query" : "caf\\u00e9 \\/ tea" ,\n "limit": 1.0e1 }'
    events = run('{ "name" : "search" , "arguments" : ' + arguments + " }", parallel=False)
    assert "".join(arguments_of(events, 0)) == arguments


def test_parallel_calls_stream_each_under_its_own_index_and_id() -> None:
    first = '{"query": "one two three four"}'
    second = '{"query": "five", "limit": 2}'
    text = f'[{{"name": "search", "arguments": {first}}}, {{"name": "get_time", "arguments": {{}}}}]'
    text = text.replace("}}]", f'}}}}, {{"name": "search", "arguments": {second}}}]')
    events = run(text, parallel=True)
    starts = [e for e in events if isinstance(e, ToolCallStart)]
    assert [(s.id, s.name, s.call_index) for s in starts] == [
        ("call_0", "search", 0),
        ("call_1", "get_time", 1),
        ("call_2", "search", 2),
    ]
    assert "".join(arguments_of(events, 0)) == first and len(arguments_of(events, 0)) > 1
    assert "".join(arguments_of(events, 1)) == "{}"
    assert "".join(arguments_of(events, 2)) == second
    for call_index in range(3):  # each call's events in order: start, deltas, end, before the next starts
        own = [e for e in events if isinstance(e, (ToolCallStart, ToolCallDelta, ToolCallEnd))]
        positions = [i for i, e in enumerate(own) if e.call_index == call_index]
        assert positions == list(range(positions[0], positions[-1] + 1))
        assert isinstance(own[positions[0]], ToolCallStart) and own[positions[-1]] == ToolCallEnd(call_index=call_index)


def test_a_second_call_to_the_same_tool_leaves_whole_and_a_repeat_not_at_all() -> None:
    text = '[{"name": "search", "arguments": {"query": "a"}}, {"name": "search", "arguments": {"query": "b"}}, '
    text += '{"name": "search", "arguments": {"query": "a"}}, {"name": "get_time", "arguments": {}}]'
    events = run(text, parallel=True)
    assert arguments_of(events, 1) == ['{"query": "b"}']
    assert [e.name for e in events if isinstance(e, ToolCallStart)] == ["search", "search"]
    assert events[-1] == Finish("tool_calls", Usage(5, 7))


def test_a_call_cut_off_in_its_arguments_ends_where_it_was_cut() -> None:
    cut = Finish("length", Usage(5, 8))
    events = run('{"name": "search", "arguments": {"query": "unfini', parallel=False, finish=cut)
    assert "".join(arguments_of(events, 0)) == '{"query": "unfini'
    assert events[-2:] == [ToolCallEnd(), cut]


def test_a_call_off_its_schema_ends_with_the_error_after_its_pieces() -> None:
    plan = plan_calls(TOOLS, "required", parallel=False)
    sent: list[GenerationEvent | None] = []
    with pytest.raises(InternalError):
        sent.extend(forced_calls(tokens('{"name": "search", "arguments": {"limit": 3}}'), plan, ids()))
    assert isinstance(sent[0], ToolCallStart) and ToolCallEnd() not in sent


def test_stopping_inside_a_streamed_call_is_an_internal_error() -> None:
    with pytest.raises(InternalError):
        run('{"name": "search", "arguments": {"query": "x', parallel=False)


def test_the_scanner_reads_name_arguments_and_the_whole_call() -> None:
    scanner = CallScanner(0)
    text = '{"name": "a\\"b", "arguments": {"k": "}"}}'
    scans = [s for piece in tokens(text, 4) for s in scanner.feed(piece.text)]
    assert scans[0] == CallBegun('a"b')
    assert "".join(s.text for s in scans if isinstance(s, CallText)) == '{"k": "}"}'
    assert scans[-1] == CallDone(text, '{"k": "}"}')
