"""A client's GBNF grammar (llama.cpp's `grammar` field): read as strictly as llama.cpp reads it,
refused with where it fails, and a finished output checked against it."""

from __future__ import annotations

import llama_cpp
import pytest

from asgi_llm.core import Finish, InternalError, InvalidRequest, TextDelta, Usage
from asgi_llm.engines.decoding.client_grammar import MAX_GRAMMAR_CHARS, client_grammar, in_grammar
from asgi_llm.engines.decoding.recognizer import Position

GOOD = [
    'root ::= "yes" | "no"',
    'root ::= answer "."\nanswer ::= [A-Z] [a-z]{2,8} ( " " [a-z]+ )*',
    '# a comment\nroot ::= ( "a"\n  | "b" )+ # trailing\n\nother ::= "unused"',
    'root ::= "x" |\n  "y"',
    'root ::= [^\\n"]{1,5} "\\u00e9" "\\x41" .',
    'root ::= ("ab"){3} "c"{ 2 , 4 } "d"{1,} "e"?',
    'root ::= item ("," item){0,19}\nitem ::= [0-9]+',
    'root ::= ("a" root-1)+ x-2?\nroot-1 ::= "b"\nx-2 ::= "c"',  # names like those of the groups' own rules
]
CHAIN = "root ::= r0\n" + "".join(f'r{i} ::= r{i + 1} "a"\n' for i in range(500)) + 'r500 ::= "a"\n'
BAD = [  # text, what the message says, line, column (0: no position, the rule is named)
    ('root ::= "yes', "the string opened here is not closed", 1, 10),
    ("root ::= [a-z\n", "the character class opened here is not closed", 1, 10),
    ('root ::= "a" x\nx ::= x "b" | "c"', "rule 'x' is left-recursive", 0, 0),
    ('root ::= "a" other', "undefined rules: ['other']", 0, 0),
    ('root ::= "a"\nroot ::= "b"', "rule 'root' is defined twice", 2, 1),
    ('answer ::= "a"', "the grammar has no rule 'root'", 0, 0),
    ('root ::= "a" root', "rules that never end", 0, 0),
    ('root ::= "\\q"', "unknown escape", 1, 11),
    ('root ::= "a"\n  "b" ::= x', "expected a rule name", 2, 3),
    ("root ::= [a-z]{2001}", "the repetition makes too many rules", 1, 15),
    ("root ::= ([a-z] [0-9]?){1999}", "the repetition makes too many rules", 1, 24),
    ("root ::= [a-z]{3,2}", "reversed", 1, 15),  # llama.cpp loops without end on it
    ("root ::= [a-z]{,2}", "expected a number", 1, 16),
    ('root ::= "a"{0#,19}', "unexpected end of the grammar", 1, 20),  # the comment ate the bound
    ('root ::= ("a" | "b"', "the group opened here is not closed", 1, 10),
    ("root ::= <[42]>", "token references", 1, 10),
    ('root ::= * "a"', "nothing before '*' to repeat", 1, 10),
    ('root ::= "a" _x\n_x ::= "b"', "unexpected '_'", 1, 14),  # llama.cpp's names have no underscore
    ('root : "a"', "expected '::='", 1, 6),
    ("", "the grammar has no rule 'root'", 0, 0),
    (CHAIN, "the grammar nests 502 rules before a character", 0, 0),
]

OURS_ONLY = (
    "reversed",  # llama.cpp loops without end on it, so it is never handed one
    "rules that never end",  # llama.cpp takes it, but no output could ever be complete
    "defined twice",  # llama.cpp keeps the last definition: refused here as a likely mistake
    "token references",  # llama.cpp takes them, but the output is followed as text here
    "nests",  # llama.cpp takes it, but the closing watch could not follow it
)


def _llama_cpp_reads(text: str) -> bool:
    sampler = llama_cpp.llama_sampler_init_grammar(None, text.encode(), b"root")
    if sampler:
        llama_cpp.llama_sampler_free(sampler)
    return bool(sampler)


@pytest.mark.parametrize("text", GOOD)
def test_grammars_llama_cpp_reads_are_read(text: str) -> None:
    grammar = client_grammar(text, "grammar")
    assert _llama_cpp_reads(text)
    shortest = grammar.shortest["root"]
    assert Position(grammar).advance(shortest).complete


@pytest.mark.parametrize(("text", "says", "line", "column"), BAD)
def test_a_bad_grammar_is_refused_saying_where(text: str, says: str, line: int, column: int) -> None:
    with pytest.raises(InvalidRequest) as refused:
        client_grammar(text, "grammar")
    assert refused.value.param == "grammar"
    assert says in str(refused.value)
    if line:
        assert f"at line {line}, column {column}." in str(refused.value)


@pytest.mark.parametrize("text", [t for t, says, *_ in BAD if t and not any(o in says for o in OURS_ONLY)])
def test_what_is_refused_llama_cpp_would_not_take_either(text: str) -> None:
    """Refused where llama.cpp's reader fails too (it prints the grammar to stderr and goes on
    without one), or would loop (reversed bounds). An empty text is no grammar to it; the
    adapters treat an empty `grammar` as not sent, as llama-server does."""
    assert not _llama_cpp_reads(text)


def test_a_huge_grammar_is_refused() -> None:
    with pytest.raises(InvalidRequest, match=str(MAX_GRAMMAR_CHARS)):
        client_grammar('root ::= "' + "a" * MAX_GRAMMAR_CHARS + '"', "grammar")
    with pytest.raises(InvalidRequest, match="too deeply"):
        client_grammar("root ::= " + "(" * 5000 + '"a"' + ")" * 5000, "grammar")


def test_a_finished_output_must_be_a_sentence() -> None:
    grammar = client_grammar('root ::= "yes" | "no"', "grammar")
    done = [TextDelta("ye"), TextDelta("s"), Finish("stop", Usage(1, 1))]
    assert list(in_grammar(done, grammar)) == done
    cut = [TextDelta("y"), Finish("stop", Usage(1, 1), stop_sequence="e")]
    assert list(in_grammar(cut, grammar)) == cut  # the client's own stop sequence cut it
    with pytest.raises(InternalError):
        list(in_grammar([TextDelta("ye"), Finish("stop", Usage(1, 1))], grammar))


def test_a_finished_output_is_a_sentence_with_the_prefill_it_continues() -> None:
    grammar = client_grammar('root ::= "yes" | "no"', "grammar")
    rest = [TextDelta("s"), Finish("stop", Usage(1, 1))]
    assert list(in_grammar(rest, grammar, "ye")) == rest
    with pytest.raises(InternalError):
        list(in_grammar(rest, grammar))
