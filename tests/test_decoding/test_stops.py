"""Stop sequences never reach the client, even when split across decoded pieces."""

from __future__ import annotations

from asgi_llm.engines.decoding.stops import StopMatcher


def feed_all(matcher: StopMatcher, pieces: list[str]) -> list[str]:
    return [matcher.feed(p) for p in pieces]


def test_no_stops_passes_text_through() -> None:
    matcher = StopMatcher(())
    assert feed_all(matcher, ["a<", "/s>"]) == ["a<", "/s>"]
    assert matcher.flush() == "" and matcher.matched is None


def test_empty_stop_strings_are_ignored() -> None:
    matcher = StopMatcher(("",))
    assert matcher.feed("abc") == "abc"
    assert matcher.matched is None


def test_plain_match_cuts_before_the_stop() -> None:
    matcher = StopMatcher(("\n\n",))
    assert matcher.feed("Hello\n\nmore") == "Hello"
    assert matcher.matched == "\n\n"


def test_partial_is_held_back_then_matched_across_pieces() -> None:
    matcher = StopMatcher(("</s>",))
    assert feed_all(matcher, ["Hello <", "/", "s", ">tail"]) == ["Hello ", "", "", ""]
    assert matcher.matched == "</s>"
    assert matcher.flush() == ""


def test_held_partial_is_released_when_it_stops_matching() -> None:
    matcher = StopMatcher(("</s>",))
    assert matcher.feed("a </") == "a "
    assert matcher.feed("b>") == "</b>"
    assert matcher.matched is None


def test_longest_partial_is_held() -> None:
    matcher = StopMatcher(("abcd",))
    assert matcher.feed("xabc") == "x"
    assert matcher.feed("e") == "abce"


def test_partial_of_any_stop_is_held() -> None:
    matcher = StopMatcher(("STOP", "END"))
    assert matcher.feed("the E") == "the "
    assert matcher.feed("ND") == ""
    assert matcher.matched == "END"


def test_earliest_match_wins_whatever_the_order() -> None:
    matcher = StopMatcher(("world", "lo"))
    assert matcher.feed("hello world") == "hel"
    assert matcher.matched == "lo"


def test_earliest_match_across_pieces() -> None:
    matcher = StopMatcher(("cd", "bcde"))
    assert matcher.feed("ab") == "a"  # "b" may start "bcde"
    assert matcher.feed("cdef") == ""  # in "bcdef", "bcde" (at 0) comes before "cd" (at 1)
    assert matcher.matched == "bcde"


def test_full_match_after_a_false_start() -> None:
    matcher = StopMatcher(("abc",))
    assert matcher.feed("ab") == ""
    assert matcher.feed("abc") == "ab"
    assert matcher.matched == "abc"


def test_flush_returns_what_was_held() -> None:
    matcher = StopMatcher(("</s>",))
    assert matcher.feed("end </") == "end "
    assert matcher.flush() == "</"
    assert matcher.flush() == ""
    assert matcher.matched is None


def test_emitted_text_concatenates_to_the_input_without_a_match() -> None:
    matcher = StopMatcher(("###", "User:"))
    pieces = ["Us", "e", "r", " said #", "#", " then U", "ser"]
    emitted = "".join(feed_all(matcher, pieces)) + matcher.flush()
    assert emitted == "".join(pieces)
    assert matcher.matched is None
