"""`tool_choice: auto`: a call that decoding holds to its grammar streams its arguments as they
are decoded, in each model family's syntax; the pieces are the final arguments."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence

import pytest

from asgi_llm.core import (
    ChatRequest,
    Finish,
    GenerationEvent,
    InternalError,
    Message,
    TextDelta,
    TokenLogprob,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    ToolSpec,
    Usage,
)
from asgi_llm.engines.decoding.constraints import constraint_for
from asgi_llm.engines.decoding.grammar import validator
from asgi_llm.engines.decoding.tool_detect import detected_calls

CHECKS = {
    "get_weather": validator({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
    "get_time": validator({"type": "object"}),
}
PARIS = '{"city": "Paris, the capital of France"}'
DONE = Finish("stop", Usage(2, 30))
LOGPROB = TokenLogprob("x", -0.5, b"x")


def ids() -> Callable[[], str]:
    counter = itertools.count()
    return lambda: f"call_{next(counter)}"


def tokens(text: str, size: int = 3) -> list[TextDelta]:
    return [TextDelta(text[i : i + size]) for i in range(0, len(text), size)]


def run(text: str, finish: Finish = DONE, *, parallel: bool = True, held: bool = True) -> list[GenerationEvent | None]:
    events: list[GenerationEvent | None] = [*tokens(text), finish]
    return list(detected_calls(events, CHECKS, ids(), parallel=parallel, held=lambda: held))


def pieces(events: Iterable[GenerationEvent | None], call_index: int = 0) -> list[str]:
    return [e.arguments for e in events if isinstance(e, ToolCallDelta) and e.call_index == call_index]


def starts(events: Sequence[GenerationEvent | None]) -> list[tuple[str, str, int]]:
    return [(e.id, e.name, e.call_index) for e in events if isinstance(e, ToolCallStart)]


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(
            f'Let me look.<tool_call>\n{{"name": "get_weather", "arguments": {PARIS}}}\n</tool_call>', id="hermes"
        ),
        pytest.param(f'[TOOL_CALLS][{{"name": "get_weather", "arguments": {PARIS}}}]', id="mistral"),
        pytest.param(f'<|python_tag|>{{"name": "get_weather", "parameters": {PARIS}}}', id="llama-python-tag"),
        pytest.param(f'\n {{"name": "get_weather", "parameters": {PARIS}}}', id="bare-object"),
        pytest.param(f' [{{"name": "get_weather", "arguments": {PARIS}}}]', id="bare-array"),
    ],
)
def test_a_held_call_streams_its_arguments_in_pieces_that_make_them_whole(text: str) -> None:
    events = run(text)
    assert starts(events) == [("call_0", "get_weather", 0)]
    assert len(pieces(events)) > 5 and "".join(pieces(events)) == PARIS
    calls = [e for e in events if isinstance(e, (ToolCallStart, ToolCallDelta, ToolCallEnd))]
    assert isinstance(calls[0], ToolCallStart) and calls[-1] == ToolCallEnd()
    assert events[-1] == Finish("tool_calls", Usage(2, 30))
    said = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert said == ("Let me look." if text.startswith("Let") else "")


def test_the_arguments_stream_before_the_call_completes() -> None:
    steps = ["Sure.", "<tool_call>", '{"name": "get_weather", ', '"arguments": {"ci', 'ty": "Oslo"}}', "</tool_call>"]
    feed: list[GenerationEvent | None] = []
    for step in steps:
        feed += [TextDelta(step), None]
    stream = detected_calls([*feed, DONE], CHECKS, ids(), held=lambda: True)
    by_step: list[list[GenerationEvent]] = [[]]
    for event in stream:
        if event is None:
            by_step.append([])
        else:
            by_step[-1].append(event)
    assert by_step[:6] == [
        [TextDelta("Sure.")],
        [],
        [],
        [ToolCallStart("call_0", "get_weather"), ToolCallDelta('{"ci')],
        [ToolCallDelta('ty": "Oslo"}'), ToolCallEnd()],
        [],
    ]
    assert by_step[6] == [Finish("tool_calls", Usage(2, 30))]


def test_parallel_calls_stream_one_after_another_each_under_its_own_index_and_id() -> None:
    second = '{"city": "Oslo"}'
    text = (
        f'<tool_call>{{"name": "get_weather", "arguments": {PARIS}}}</tool_call>\n'
        '<tool_call>{"name": "get_time", "arguments": {}}</tool_call>\n'
        f'<tool_call>{{"name": "get_weather", "arguments": {second}}}</tool_call>'
    )
    events = run(text)
    assert starts(events) == [("call_0", "get_weather", 0), ("call_1", "get_time", 1), ("call_2", "get_weather", 2)]
    assert "".join(pieces(events, 0)) == PARIS and len(pieces(events, 0)) > 1
    assert pieces(events, 1) == ["{}"]
    assert pieces(events, 2) == [second]  # a second call to a tool is held whole: it may repeat one
    own = [e for e in events if isinstance(e, (ToolCallStart, ToolCallDelta, ToolCallEnd))]
    for call_index in range(3):  # start, deltas, end, before the next call starts
        at = [i for i, e in enumerate(own) if e.call_index == call_index]
        assert at == list(range(at[0], at[-1] + 1)) and own[at[-1]] == ToolCallEnd(call_index=call_index)


def test_a_repeat_is_not_sent_nor_any_call_after_it() -> None:
    call = f'{{"name": "get_weather", "arguments": {PARIS}}}'
    text = f'[TOOL_CALLS][{call}, {call}, {{"name": "get_time", "arguments": {{}}}}]'
    events = run(text)
    assert starts(events) == [("call_0", "get_weather", 0)]
    assert events[-1] == Finish("tool_calls", Usage(2, 30))


def test_without_parallel_calls_only_the_first_is_sent() -> None:
    text = f'[{{"name": "get_time", "arguments": {{}}}}, {{"name": "get_weather", "arguments": {PARIS}}}]'
    events = run(text, parallel=False)
    assert starts(events) == [("call_0", "get_time", 0)] and not pieces(events, 1)


def test_a_call_cut_off_by_its_token_limit_ends_where_it_was_cut() -> None:
    cut = Finish("length", Usage(2, 12))
    events = run('<tool_call>{"name": "get_weather", "arguments": {"city": "Par', cut)
    assert "".join(pieces(events)) == '{"city": "Par'
    assert events[-2:] == [ToolCallEnd(), cut]


def test_stopping_inside_a_streamed_call_is_an_internal_error() -> None:
    with pytest.raises(InternalError):
        run('<tool_call>{"name": "get_weather", "arguments": {"city": "Par')


def test_a_held_call_off_its_schema_ends_with_an_error_after_its_pieces() -> None:
    sent: list[GenerationEvent | None] = []
    events = [*tokens('<tool_call>{"name": "get_weather", "arguments": {"town": "Rome"}}</tool_call>'), DONE]
    with pytest.raises(InternalError):
        sent.extend(detected_calls(events, CHECKS, ids(), held=lambda: True))
    assert isinstance(sent[0], ToolCallStart) and ToolCallEnd() not in sent


def test_an_output_that_ends_before_its_call_began_sends_the_text_it_was() -> None:
    cut = Finish("length", Usage(2, 5))
    events = run('Hm. <tool_call>{"name": "get_wea', cut)
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == 'Hm. <tool_call>{"name": "get_wea'
    assert events[-1] == cut and not starts(events)


def test_a_call_not_held_is_sent_whole_once_complete() -> None:
    events = run(f'<tool_call>{{"name": "get_weather", "arguments": {PARIS}}}</tool_call>', held=False)
    assert pieces(events) == [PARIS]


def test_text_keeps_its_logprobs_and_the_calls_drop_theirs() -> None:
    text = ["Hi.", "<tool_call>", '{"name": "get_time", "arguments": {', "}}", "</tool_call>"]
    events = [TextDelta(piece, logprobs=(LOGPROB,)) for piece in text] + [DONE]
    out = list(detected_calls(events, CHECKS, ids(), held=lambda: True))
    assert out == [
        TextDelta("Hi.", logprobs=(LOGPROB,)),
        ToolCallStart("call_0", "get_time"),
        ToolCallDelta("{"),
        ToolCallDelta("}"),
        ToolCallEnd(),
        Finish("tool_calls", Usage(2, 30)),
    ]


def test_the_constraint_streams_auto_calls_where_decoding_holds_them() -> None:
    tool = ToolSpec("get_time", None, {"type": "object"})
    request = ChatRequest("m", (Message("user", "hi"),), tools=(tool,))
    constraint = constraint_for(request, new_id=lambda: "call_1")
    events = [*tokens('{"name": "get_time", "arguments": {"zone": "CET"}}'), DONE]
    held = list(constraint.wrap_for(lambda: True)(events))
    whole = list(constraint.wrap(events))
    assert len(pieces(held)) > 1 and "".join(pieces(held)) == '{"zone": "CET"}'
    assert pieces(whole) == ['{"zone": "CET"}']
    forced = constraint_for(ChatRequest("m", (Message("user", "hi"),), tools=(tool,), tool_choice="required"))
    assert forced.wrap_for(lambda: True) is forced.wrap
