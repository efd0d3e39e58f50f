"""Reasoning text is split from the answer while it streams, whatever the pieces' boundaries."""

from __future__ import annotations

import pytest

from asgi_llm.engines.decoding.reasoning import Reasoned, ReasoningSplitter, Split


def run(splitter: ReasoningSplitter, pieces: list[str]) -> tuple[list[Split], Split]:
    return [splitter.feed(p) for p in pieces], splitter.finish()


def joined(splits: list[Split], end: Split) -> tuple[str, str]:
    every = [*splits, end]
    return "".join(s.reasoning for s in every), "".join(s.answer for s in every)


def test_no_reasoning_passes_text_through_unchanged() -> None:
    splitter = ReasoningSplitter()
    splits, end = run(splitter, ["Hello", " there", "\n<think>not reasoning</think>"])
    assert splits == [Split("", "Hello"), Split("", " there"), Split("", "\n<think>not reasoning</think>")]
    assert end == Split() and splitter.answering


def test_leading_whitespace_without_reasoning_is_kept() -> None:
    splits, end = run(ReasoningSplitter(), ["\n", " Hi"])
    assert splits == [Split(), Split("", "\n Hi")]
    assert end == Split()


def test_reasoning_then_answer() -> None:
    splits, end = run(ReasoningSplitter(), ["<think>\nLet me see.", " Two.\n</think>\n\n", "The answer", " is 2."])
    assert splits == [Split("Let me see.", ""), Split(" Two.\n", ""), Split("", "The answer"), Split("", " is 2.")]
    assert end == Split()


def test_markers_split_across_pieces() -> None:
    pieces = ["<", "thi", "nk", ">", "hmm <", "b> ok", "</", "thin", "k", ">", "Yes"]
    splits, end = run(ReasoningSplitter(), pieces)
    assert joined(splits, end) == ("hmm <b> ok", "Yes")
    assert splits[:4] == [Split()] * 4  # the opening marker is held until it is known
    assert splits[4] == Split("hmm ", "")  # only what may begin the closing marker is held back
    assert splits[5] == Split("<b> ok", "")
    assert splits[6:9] == [Split()] * 3


def test_close_marker_and_answer_in_one_piece() -> None:
    splits, end = run(ReasoningSplitter(), ["<think>a", "b</think> Answer"])
    assert splits == [Split("a", ""), Split("b", "Answer")]
    assert end == Split()


def test_a_false_start_of_the_opening_marker_is_answer() -> None:
    splits, end = run(ReasoningSplitter(), ["<th", "ing>"])
    assert splits == [Split(), Split("", "<thing>")]
    assert end == Split()


def test_unterminated_reasoning_is_flushed_as_reasoning() -> None:
    splitter = ReasoningSplitter()
    splits, end = run(splitter, ["<think>still thinking", " </thi"])
    assert splits == [Split("still thinking", ""), Split(" ", "")]
    assert end == Split("</thi", "") and splitter.reasoning


def test_output_that_ends_while_the_opening_marker_may_follow_is_answer() -> None:
    splits, end = run(ReasoningSplitter(), [" <th"])
    assert splits == [Split()]
    assert end == Split("", " <th")


def test_template_opened_the_block() -> None:
    splits, end = run(ReasoningSplitter(inside=True), ["\nThinking", " hard</", "think>\n", "\nDone."])
    assert joined(splits, end) == ("Thinking hard", "Done.")
    assert splits[0] == Split("Thinking", "")


def test_template_opened_the_block_and_the_model_opens_it_again() -> None:
    splits, end = run(ReasoningSplitter(inside=True), ["<think>", "x", "</think>", "y"])
    assert joined(splits, end) == ("x", "y")


def test_template_opened_the_block_and_the_model_closes_it_at_once() -> None:
    splits, end = run(ReasoningSplitter(inside=True), ["<", "/think>", "Answer"])
    assert joined(splits, end) == ("", "Answer")


def test_template_opened_the_block_unterminated() -> None:
    splits, end = run(ReasoningSplitter(inside=True), ["all", " reasoning <"])
    assert joined(splits, end) == ("all reasoning <", "")


def test_configurable_markers() -> None:
    splitter = ReasoningSplitter("[THINK]", "[/THINK]")
    splits, end = run(splitter, ["[THI", "NK]plan[/TH", "INK]answer <think>"])
    assert joined(splits, end) == ("plan", "answer <think>")


def test_empty_markers_are_refused() -> None:
    with pytest.raises(ValueError):
        ReasoningSplitter("", "</think>")


def test_in_block_covers_reasoning_and_the_whitespace_after_it() -> None:
    splitter = ReasoningSplitter()
    assert not splitter.in_block
    splitter.feed("<think>a")
    assert splitter.in_block
    splitter.feed("</think>\n")
    assert splitter.in_block and splitter.answering
    splitter.feed("b")
    assert not splitter.in_block and splitter.answering


def test_tool_call_detection_leaves_reasoning_alone() -> None:
    from asgi_llm.core.events import Finish, ReasoningDelta, TextDelta, ToolCallStart, Usage
    from asgi_llm.engines.decoding.tool_detect import detected_calls

    events = [
        ReasoningDelta('<tool_call>{"name": "f", "arguments": {}}</tool_call>'),
        TextDelta("Hello"),
        Finish("stop", Usage(1, 2)),
    ]
    out = list(detected_calls(events, {"f": _AnyValid()}, lambda: "call_1"))
    assert out[0] == events[0] and out[1] == events[1]
    assert not any(isinstance(e, ToolCallStart) for e in out)


class _AnyValid:
    def is_valid(self, instance: object) -> bool:
        return True


def _count(pieces: list[str], *, inside: bool = False) -> int:
    splitter, reasoned = ReasoningSplitter(inside=inside), Reasoned()
    for piece in pieces:
        splitter.feed(piece)
        reasoned.count(splitter)
    return reasoned.tokens


@pytest.mark.parametrize(
    ("pieces", "inside", "expected"),
    [
        (["<think>", "Two", " and", " two", "</think>", "Four"], False, 5),  # the block and both markers
        ([" ", "<th", "ink>", "Hm", "</think>", " Yes", "."], False, 5),  # held pieces that opened a block
        (["Hello", " <think>", " there"], False, 0),  # no block: an answer that mentions one
        ([" ", "Hello"], False, 0),  # held whitespace that turned out to be answer
        (["Still", " thinking", " when", " cut"], True, 4),  # a block the prompt opened, never closed
        (["Done", "</think>", "Answer", " here"], True, 2),
    ],
)
def test_reasoning_tokens_are_the_ones_spent_in_the_block(pieces: list[str], inside: bool, expected: int) -> None:
    assert _count(pieces, inside=inside) == expected
