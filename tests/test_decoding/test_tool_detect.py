"""Tool calls found in free text as it streams, in each model family's syntax; anything else stays text."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest

from asgi_llm.core import Finish, TextDelta, TokenLogprob, ToolCallDelta, ToolCallEnd, ToolCallStart, ToolSpec, Usage
from asgi_llm.engines.decoding.grammar import validator
from asgi_llm.engines.decoding.schema_gbnf import schema_gbnf
from asgi_llm.engines.decoding.tool_calls import plan_calls
from asgi_llm.engines.decoding.tool_detect import (
    Call,
    CallDetector,
    JsonEnd,
    call_level,
    detected_calls,
    json_end,
    trigger_grammar,
)

CHECKS = {
    "get_weather": validator({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
    "get_time": validator({"type": "object"}),
}
PARIS = Call("get_weather", '{"city": "Paris"}')


def run(pieces: list[str]) -> list[str | Call]:
    detector = CallDetector(CHECKS)
    out = [o for piece in pieces for o in detector.feed(piece)] + detector.finish()
    merged: list[str | Call] = []
    for o in out:  # adjacent text pieces, joined, so cases compare what a client would see
        if isinstance(o, str) and merged and isinstance(merged[-1], str):
            merged[-1] += o
        else:
            merged.append(o)
    return merged


def chars(text: str) -> list[str]:
    return list(text)


@pytest.mark.parametrize("split", [lambda t: [t], chars], ids=["whole", "char-by-char"])
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("Hello there.", ["Hello there."], id="plain-text"),
        pytest.param(
            'Let me check.<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
            ["Let me check.", PARIS],
            id="hermes",
        ),
        pytest.param(
            '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>\n'
            '<tool_call>{"name": "get_time", "arguments": {}}</tool_call>',
            [PARIS, Call("get_time", "{}")],
            id="hermes-two-calls",
        ),
        pytest.param(
            '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "get_time", "arguments": {}}]',
            [PARIS, Call("get_time", "{}")],
            id="mistral",
        ),
        pytest.param(
            '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}', [PARIS], id="llama-python-tag"
        ),
        pytest.param('\n {"name": "get_weather", "parameters": {"city": "Paris"}}', [PARIS], id="llama-bare-json"),
        pytest.param(
            '{"name": "get_weather", "arguments": "{\\"city\\": \\"Paris\\"}"}', [PARIS], id="arguments-as-text"
        ),
        pytest.param('{"name": "get_weather", "arguments": {"city": "Paris"}}\n', [PARIS], id="bare-then-whitespace"),
        pytest.param('{"a": 1}', ['{"a": 1}'], id="json-that-is-no-call"),
        pytest.param(
            '{"name": "get_weather", "arguments": {"town": "Paris"}}',
            ['{"name": "get_weather", "arguments": {"town": "Paris"}}'],
            id="arguments-off-schema",
        ),
        pytest.param('{"name": "launch", "arguments": {}}', ['{"name": "launch", "arguments": {}}'], id="unknown-tool"),
        pytest.param(
            'Use {"name": "get_time", "arguments": {}} like this.',
            ['Use {"name": "get_time", "arguments": {}} like this.'],
            id="json-after-text-is-text",
        ),
        pytest.param("a <tool_ is not a marker", ["a <tool_ is not a marker"], id="partial-marker"),
        pytest.param("<tool_call>not json</tool_call>", ["<tool_call>not json</tool_call>"], id="marker-without-json"),
        pytest.param('<tool_call>{"name": "get_ti', ['<tool_call>{"name": "get_ti'], id="cut-off-call"),
        pytest.param("   ", [], id="only-whitespace"),
    ],
)
def test_detection(text: str, expected: list[str | Call], split: object) -> None:
    assert run(split(text)) == expected  # type: ignore[operator]


def test_text_is_held_back_only_while_it_may_start_a_marker() -> None:
    detector = CallDetector(CHECKS)
    assert detector.feed("Sure <tool") == ["Sure "]
    assert detector.feed("box!") == ["<toolbox!"]
    assert detector.feed(" <tool_call>") == [" "]
    assert detector.in_call and detector.call_text == ""
    assert detector.feed('{"name"') == [] and detector.call_text == '{"name"'


def test_a_bare_call_is_seen_from_its_first_brace() -> None:
    detector = CallDetector(CHECKS)
    assert detector.feed("  {") == [] and detector.in_call and detector.call_text == "{"


@pytest.mark.parametrize(
    ("text", "end"),
    [('{"a": "}"} tail', 10), ("  [1, [2]]", 10), ('{"a": ', None), ("x{}", -1), ("", None), ('{"s": "\\""}', 11)],
)
def test_json_end(text: str, end: int | None) -> None:
    assert json_end(text) == end
    scan = JsonEnd()  # the same, a character at a time
    found = [scan.feed(ch) for ch in text]
    assert (found[-1] if found else scan.feed("")) == end
    assert end is None or scan.feed("more") == end  # once ended, it stays where it ended


def test_a_long_bare_call_fed_a_token_at_a_time_is_scanned_once() -> None:
    city = "x" * 20_000
    text = '{"name": "get_weather", "arguments": {"city": "' + city + '"}} after'
    detector = CallDetector(CHECKS)
    out: list[str | Call] = []
    for start in range(0, len(text), 3):
        out += detector.feed(text[start : start + 3])
    out += detector.finish()
    assert out[0] == Call("get_weather", '{"city": "' + city + '"}') and "".join(map(str, out[1:])) == " after"
    assert detector._bare.seen <= len(text)  # every character once, not once a token


def _ids() -> Callable[[], str]:
    counter = itertools.count()
    return lambda: f"call_{next(counter)}"


LOGPROB = TokenLogprob("x", -0.5, b"x")


def test_detected_calls_become_events_and_the_reason_tool_calls() -> None:
    pieces = ["Checking.", "<tool_call>", '{"name": "get_time", "arguments": {}}', "</tool_call>"]
    events = [TextDelta(p, index=1, logprobs=(LOGPROB,)) for p in pieces] + [Finish("stop", Usage(2, 4), index=1)]
    out = list(detected_calls([None, *events], CHECKS, _ids()))
    assert out == [
        None,
        TextDelta("Checking.", index=1, logprobs=(LOGPROB,)),
        ToolCallStart("call_0", "get_time", index=1),
        ToolCallDelta("{}", index=1),
        ToolCallEnd(index=1),
        Finish("tool_calls", Usage(2, 4), index=1),
    ]


def test_without_parallel_calls_only_the_first_is_sent() -> None:
    text = '[TOOL_CALLS][{"name": "get_time", "arguments": {}}, {"name": "get_weather", "arguments": {"city": "Oslo"}}]'
    out = list(detected_calls([TextDelta(text), Finish("stop", Usage(2, 4))], CHECKS, _ids(), parallel=False))
    assert [e.name for e in out if isinstance(e, ToolCallStart)] == ["get_time"]


def test_text_without_calls_keeps_its_reason_and_logprobs() -> None:
    events = [
        TextDelta("Hi <tool", logprobs=(LOGPROB,)),
        TextDelta("", logprobs=(LOGPROB,)),
        Finish("length", Usage(2, 2)),
    ]
    out = list(detected_calls(events, CHECKS, _ids()))
    assert out == [
        TextDelta("Hi ", logprobs=(LOGPROB,)),
        TextDelta("<tool", logprobs=(LOGPROB,)),
        Finish("length", Usage(2, 2)),
    ]


CALL_GBNF = schema_gbnf(
    plan_calls((ToolSpec("get_time", None, {}),), "required", False, keys=("arguments", "parameters")).form
)


@pytest.mark.parametrize(
    ("marker", "call_text", "parallel", "root"),
    [
        ("<tool_call>", "", False, 'root ::= tool-ws tool-call tool-ws "</tool_call>"\n'),
        ("<tool_call>", "\n{", True, '(tool-ws "<tool_call>" tool-ws tool-call tool-ws "</tool_call>"){0,7}\n'),
        (
            "[TOOL_CALLS]",
            "[",
            True,
            'root ::= tool-ws "[" tool-ws tool-call (tool-ws "," tool-ws tool-call){0,7} tool-ws "]"\n',
        ),
        ("", "[{", False, 'root ::= tool-ws "[" tool-ws tool-call tool-ws "]"\n'),
        ("", "{", True, "root ::= tool-ws tool-call (tool-ws tool-call){0,7}\n"),
        ("<|python_tag|>", "{", True, "root ::= tool-ws tool-call\n"),
    ],
)
def test_trigger_grammars_wrap_one_call_rule(marker: str, call_text: str, parallel: bool, root: str) -> None:
    gbnf = trigger_grammar(CALL_GBNF, marker, call_text, parallel)
    assert gbnf.splitlines()[0].startswith("root ::= ") and gbnf.splitlines()[0].endswith(root.strip())
    assert "\ntool-call ::= " in gbnf and "\nroot ::= " not in gbnf and "tool-ws ::= [ \\t\\n]{0,20}" in gbnf
    assert 'space ::= | " " | "\\n" [ \\t]{0,20}' in gbnf


def test_a_repeated_call_is_not_sent_again_nor_any_after_it() -> None:
    """As for forced calls: the engine ends the output at a repeat (same tool, same arguments,
    whatever their key order), and nothing from there on is a call of the model's."""
    call = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}</tool_call>'
    again = '<tool_call>{"name": "get_weather", "arguments": {"unit": "c", "city": "Paris"}}</tool_call>'
    other = '<tool_call>{"name": "get_time", "arguments": {}}</tool_call>'
    events = [TextDelta(call), TextDelta(again), TextDelta(other), Finish("stop", Usage(2, 30))]
    out = list(detected_calls(events, CHECKS, _ids()))
    assert [e.name for e in out if isinstance(e, ToolCallStart)] == ["get_weather"]
    assert out[-1] == Finish("tool_calls", Usage(2, 30))
    distinct = [TextDelta(call), TextDelta(other), Finish("stop", Usage(2, 20))]
    assert [e.name for e in detected_calls(distinct, CHECKS, _ids()) if isinstance(e, ToolCallStart)] == [
        "get_weather",
        "get_time",
    ]


@pytest.mark.parametrize(
    ("marker", "call_text", "level"),
    [
        ("<tool_call>", '{"name"', 0),
        ("[TOOL_CALLS]", '[{"name"', 1),
        ("", " [{", 1),
        ("", "{", 0),
        ("<|python_tag|>", "{", 0),
    ],
)
def test_call_level_is_where_each_call_sits_in_the_json_after_the_marker(
    marker: str, call_text: str, level: int
) -> None:
    assert call_level(marker, call_text) == level
