"""Tokenizing with a bound: a prompt that cannot fit the context is refused after reading about
a context's worth of it, never after tokenizing all of it.

A body may hold megabytes of text. Tokenizing 8 MB takes seconds on the inference thread, where
every stream waits meanwhile, and holds hundreds of megabytes of token ids, only to learn that
the prompt does not fit. Two cheaper answers come first: a text of N bytes has at least
N / `longest` tokens when every token stands for at most `longest` bytes of it (BPE and
SentencePiece vocabularies: their pieces spell the text back); and a longer text is tokenized a
chunk at a time, stopping as soon as the count is surely past the limit. Pure: the tokenizer is
passed in.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

__all__ = ["TooLong", "at_least", "bounded_tokens", "chunks"]

Tokenize = Callable[[str, bool], list[int]]
"""(text, add_bos) → token ids."""

SLACK = 8
"""Tokens a chunk's own count may exceed its share of the whole text's count (a word cut in two,
a leading space SentencePiece adds to each call); counts are refused only beyond this."""


@dataclass(frozen=True)
class TooLong:
    """The text has `tokens` tokens (at least that many unless `exact`), more than the limit."""

    tokens: int
    exact: bool = False


def bounded_tokens(
    text: str, tokenize: Tokenize, *, limit: int, longest: int | None, add_bos: bool
) -> list[int] | TooLong:
    """The text's tokens, or `TooLong` once it surely has more than `limit`. `longest` is the most
    bytes one token stands for (None where the vocabulary drops text, such as WordPiece's spaces)."""
    if (surely := at_least(len(text), limit=limit, longest=longest)) is not None:
        return surely
    size = max(4 * limit, 4096)  # about a context's worth of text: most prompts are one chunk
    if len(text) <= size:
        return _checked(tokenize(text, add_bos), limit)
    counted = 0
    for cut, (start, end) in enumerate(chunks(text, size), start=1):
        counted += len(tokenize(text[start:end], add_bos and start == 0))
        if counted - SLACK * cut > limit:
            return TooLong(counted - SLACK * cut)
    return _checked(tokenize(text, add_bos), limit)  # it may fit: the exact tokens, at most ~a context's worth


def at_least(characters: int, *, limit: int, longest: int | None) -> TooLong | None:
    """`TooLong` when text of this many characters surely has more than `limit` tokens, from its
    length alone (characters <= bytes <= tokens * longest); None when it may fit."""
    if longest is None or characters <= longest * limit:
        return None
    return TooLong(-(-characters // longest))


def chunks(text: str, size: int) -> Iterator[tuple[int, int]]:
    """(start, end) spans of about `size` characters covering `text`, each cut after whitespace
    where the last quarter of the span has some (so that few words are cut in two)."""
    start = 0
    while start < len(text):
        end = min(start + size, len(text))
        if end < len(text):
            space = max(text.rfind(" ", end - size // 4, end), text.rfind("\n", end - size // 4, end))
            end = space + 1 if space > start else end
        yield start, end
        start = end


def _checked(tokens: list[int], limit: int) -> list[int] | TooLong:
    return TooLong(len(tokens), exact=True) if len(tokens) > limit else tokens
