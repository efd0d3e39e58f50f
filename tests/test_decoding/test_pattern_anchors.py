"""Anchors anywhere in a `pattern`: the automaton takes exactly the strings `re.search` matches
(as jsonschema checks them), `^` and `$` holding only at the string's ends, and the grammar's
shortest string validates."""

from __future__ import annotations

import itertools
import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asgi_llm.core import Unsupported
from asgi_llm.engines.decoding.automata import Dfa, compile_pattern
from asgi_llm.engines.decoding.gbnf import parse
from asgi_llm.engines.decoding.grammar import enforceable, validator
from asgi_llm.engines.decoding.pattern import PatternError, parse_pattern
from asgi_llm.engines.decoding.recognizer import Position
from asgi_llm.engines.decoding.schema_gbnf import schema_gbnf

PATTERNS = [
    "(^abc$|^x)",
    "^(?:foo$|bar)",
    "(^[0-9]+$)",
    "^a$|^b$",
    "(?:^|/)x",
    "(?:^|,)a(?:,|$)",
    "a|^b",
    "b$|a",
    "(^|a)(b|$)",
    "(?:^a|b)(?:c$|d)",
    "^(a|b$)*$",
    "(a$)*b",
    "(?:a|^)+b",
    "(^a)+",
    "(a|^)b{1,2}",
    "x(?:^)*y",
    "(?:$)?a",
    "^a?$|b",
    "^(?:[a-c]{2}|x$)",
    "^$",
    "^",
    "$",
    "abc",
    "^[0-9]+$",
]
IMPOSSIBLE = ["a^b", "a$b", "(a^)+", "x(^|$)y"]


def accepts(dfa: Dfa, text: str) -> bool:
    if dfa.empty:
        return False
    state = 0
    for ch in text:
        code = ord(ch)
        found = [t for ranges, t in dfa.edges[state] if any(lo <= code <= hi for lo, hi in ranges)]
        if not found:
            return False
        state = found[0]
    return state in dfa.accept


def samples(pattern: str, most: int = 5) -> list[str]:
    """Every string of up to `most` characters over the pattern's letters and digits, '/', ',' and 'z'."""
    alphabet = sorted({c for c in pattern if c.isalnum()} | {"/", ",", "z"})
    return ["".join(t) for n in range(most + 1) for t in itertools.product(alphabet, repeat=n)]


@pytest.mark.parametrize("pattern", PATTERNS + IMPOSSIBLE)
def test_the_automaton_matches_as_re_search_does(pattern: str) -> None:
    dfa = compile_pattern(pattern)
    for text in samples(pattern):
        assert accepts(dfa, text) == bool(re.search(pattern, text)), text


@pytest.mark.parametrize("pattern", IMPOSSIBLE)
def test_an_anchor_that_cannot_hold_leaves_no_string(pattern: str) -> None:
    assert compile_pattern(pattern).empty


@pytest.mark.parametrize("pattern", ["a$", "(?:a$|b)", "(^a$)"])
def test_dollar_never_holds_before_a_newline_the_grammar_cannot_write(pattern: str) -> None:
    assert re.search(pattern, "a\n")  # Python's `$` would, before a final newline
    assert not accepts(compile_pattern(pattern), "a\n")


@pytest.mark.parametrize("pattern", ["^*", "a$+", "(?:x|^{2})"])
def test_a_repeated_anchor_is_refused_as_python_refuses_it(pattern: str) -> None:
    with pytest.raises(re.error):
        re.compile(pattern)
    with pytest.raises(PatternError, match="nothing to repeat"):
        parse_pattern(pattern)


@pytest.mark.parametrize("pattern", PATTERNS)
def test_the_shortest_string_of_the_grammar_validates(pattern: str) -> None:
    schema = {"type": "string", "pattern": pattern}
    grammar = parse(schema_gbnf(enforceable(schema, "s")))
    text = Position(grammar).ending()
    assert validator(schema).is_valid(json.loads(text)), text


@pytest.mark.parametrize("pattern", PATTERNS)
def test_the_grammar_takes_exactly_the_matching_json_strings(pattern: str) -> None:
    grammar = parse(schema_gbnf(enforceable({"type": "string", "pattern": pattern}, "s")))
    for text in samples(pattern, 3):
        assert Position(grammar).advance(json.dumps(text)).complete == bool(re.search(pattern, text)), text


@pytest.mark.parametrize("pattern", IMPOSSIBLE)
def test_a_pattern_no_string_matches_is_refused(pattern: str) -> None:
    with pytest.raises(Unsupported, match="no string"):
        enforceable({"type": "string", "pattern": pattern}, "s")


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(PATTERNS), st.text(alphabet='abcxyz019/,$^ "\\é', max_size=8))
def test_random_strings_match_as_re_search_does(pattern: str, text: str) -> None:
    assert accepts(compile_pattern(pattern), text) == bool(re.search(pattern, text))
