"""A prompt that cannot fit is refused after reading about a context's worth of it."""

from __future__ import annotations

import itertools

from asgi_llm.engines.llamacpp.prompt_bound import TooLong, bounded_tokens, chunks


class Words:
    """A tokenizer of pure logic: one token per whitespace-separated word; records what it read."""

    def __init__(self) -> None:
        self.read = 0

    def __call__(self, text: str, add_bos: bool) -> list[int]:
        self.read += len(text)
        return [0] * (len(text.split()) + add_bos)


EIGHT_MB = "word " * (8 * 1024 * 1024 // 5)


def test_a_short_prompt_is_tokenized_once_and_whole() -> None:
    tokenize = Words()
    assert bounded_tokens("a b c", tokenize, limit=10, longest=None, add_bos=True) == [0, 0, 0, 0]
    assert tokenize.read == 5


def test_the_length_bound_refuses_without_tokenizing() -> None:
    tokenize = Words()
    result = bounded_tokens(EIGHT_MB, tokenize, limit=2047, longest=81, add_bos=True)
    assert result == TooLong(-(-len(EIGHT_MB) // 81))
    assert tokenize.read == 0


def test_without_a_length_bound_counting_stops_past_the_limit() -> None:
    tokenize = Words()
    result = bounded_tokens(EIGHT_MB, tokenize, limit=2047, longest=None, add_bos=True)
    assert isinstance(result, TooLong) and not result.exact and result.tokens > 2047
    assert tokenize.read <= 3 * 4 * 2047  # a few chunks of about four characters per allowed token


def test_a_long_prompt_that_fits_gets_its_exact_tokens() -> None:
    tokenize = Words()
    text = "x" * 20_000 + " y"
    assert bounded_tokens(text, tokenize, limit=100, longest=None, add_bos=False) == [0, 0]


def test_one_over_the_limit_is_refused_with_the_exact_count() -> None:
    assert bounded_tokens("a b c", Words(), limit=2, longest=None, add_bos=False) == TooLong(3, exact=True)


def test_chunks_cover_the_text_and_cut_after_whitespace() -> None:
    text = "alpha beta gamma delta " * 1000
    spans = list(chunks(text, 1000))
    assert spans[0][0] == 0 and spans[-1][1] == len(text)
    assert all(a[1] == b[0] for a, b in itertools.pairwise(spans))
    assert all(text[end - 1] == " " for _, end in spans)
    assert max(end - start for start, end in spans) <= 1000
