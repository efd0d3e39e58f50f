"""Reasoning text apart from the answer, while it streams: `<think>...</think>` and the like. Pure.

Reasoning models (DeepSeek-R1, Qwen3, QwQ) write their thinking between two markers before the
answer. Some chat templates open the block themselves (the prompt ends with `<think>`), so the
output starts inside the reasoning and only the closing marker appears. The splitter is fed the
decoded text piece by piece and hands back, for each piece, the reasoning and the answer text it
completes, holding back only text that may still be the start of a marker (as `StopMatcher` does).

A reasoning block is recognised only at the very start of the output (after whitespace): once the
answer has begun, a marker in it is plain text. Whitespace right after each marker is dropped.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["Reasoned", "ReasoningSplitter", "Split"]


class Split(NamedTuple):
    """What one piece completed: reasoning text first, then answer text (either may be empty)."""

    reasoning: str = ""
    answer: str = ""


_START, _REASONING, _ANSWER = range(3)


class ReasoningSplitter:
    """Feed text as it is decoded; get back reasoning and answer text. `finish()` flushes the rest.

    With `inside`, the output is taken to start inside a reasoning block the prompt opened
    (an opening marker the model repeats anyway is dropped).
    """

    def __init__(self, open_marker: str = "<think>", close_marker: str = "</think>", *, inside: bool = False) -> None:
        if not open_marker or not close_marker:
            raise ValueError("reasoning markers must not be empty")
        self._open = open_marker
        self._close = close_marker
        self._inside = inside
        self._state = _START
        self._held = ""
        self._lead = False  # whether whitespace at the start of what follows is dropped

    @property
    def answering(self) -> bool:
        """Whether the output has reached its answer (all text from here on is answer text)."""
        return self._state == _ANSWER

    @property
    def reasoning(self) -> bool:
        """Whether the output is inside a reasoning block now."""
        return self._state == _REASONING

    @property
    def in_block(self) -> bool:
        """Whether the text fed last went to a reasoning block or its markers: a block is open, or
        has just closed and no answer text has followed yet."""
        return self._state == _REASONING or (self._state == _ANSWER and self._lead)

    def feed(self, text: str) -> Split:
        if self._state == _ANSWER and not self._lead:
            return Split("", text)
        buffer, self._held = self._held + text, ""
        reasoning = answer = ""
        if self._state == _START:
            start = buffer.lstrip()
            if start.startswith(self._open):
                self._state, self._lead = _REASONING, True
                buffer = start[len(self._open) :]
            elif not start or self._open.startswith(start):
                self._held = buffer  # an opening marker may still follow
                return Split()
            elif self._inside:
                self._state, buffer = _REASONING, start
            else:
                self._state = _ANSWER
                return Split("", buffer)  # no reasoning: the text as it came
        if self._state == _REASONING:
            if self._lead:
                buffer = buffer.lstrip()
                if not buffer:
                    return Split()
                self._lead = False
            at = buffer.find(self._close)
            if at == -1:
                keep = _partial(buffer, self._close)
                self._held = buffer[len(buffer) - keep :] if keep else ""
                return Split(buffer[: len(buffer) - keep], "")
            reasoning, buffer = buffer[:at], buffer[at + len(self._close) :]
            self._state, self._lead = _ANSWER, True
        if self._lead:
            buffer = buffer.lstrip()
            self._lead = not buffer
        answer = buffer
        return Split(reasoning, answer)

    def finish(self) -> Split:
        """What is still held, once the output has ended: an unclosed block's end is reasoning."""
        held, self._held = self._held, ""
        if self._state == _REASONING or (self._state == _START and self._inside):
            return Split(held.lstrip() if self._lead or self._state == _START else held, "")
        return Split("", held)


class Reasoned:
    """Counts the tokens an output spent reasoning: each token whose text went to a block or its
    markers, and the ones held undecided before a block opened (whitespace, a marker's start)."""

    def __init__(self) -> None:
        self.tokens = 0
        self._undecided = 0

    def count(self, splitter: ReasoningSplitter) -> None:
        """After feeding one token's text to `splitter`."""
        if splitter.in_block:
            self.tokens += 1 + self._undecided
            self._undecided = 0
        elif splitter.answering:
            self._undecided = 0
        else:
            self._undecided += 1


def _partial(text: str, marker: str) -> int:
    """The length of the longest end of `text` that begins `marker`."""
    for size in range(min(len(marker) - 1, len(text)), 0, -1):
        if text.endswith(marker[:size]):
            return size
    return 0
