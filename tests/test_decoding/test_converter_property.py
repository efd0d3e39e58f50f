"""The converter on its own, under random schemas (hypothesis): every text its grammar derives is
a valid document of the client's schema, and so is the shortest completion of any prefix of one.

The texts are random derivations of the grammar, characters drawn from anywhere in each class
(escapes, non-ASCII, the edges of ranges), not only what a tokenizer would write; past a size
the derivation takes the shortest way to its end. No sampler and no closing watch are involved:
a text the grammar allows that the schema does not is the converter's fault alone.
"""

from __future__ import annotations

import json
import os
import random

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from asgi_llm.core import InvalidRequest
from asgi_llm.engines.decoding.gbnf import CharSet, Grammar
from asgi_llm.engines.decoding.grammar import validator
from asgi_llm.engines.decoding.recognizer import Position

from .closing_harness import grammar_of
from .schema_strategies import CHECKS, SCHEMAS, TREE, Schema

_ODD = "é中\u2028😀\t\x7f\\\"/{}[],:-.+eE0123456789 aAzZ"  # characters worth trying in a negated class


def derive(grammar: Grammar, rng: random.Random, size: int) -> str:
    """A random text of the grammar: random alternatives until `size` characters, the shortest after."""
    out: list[str] = []
    stack: list[CharSet | str] = [grammar.root]
    while stack:
        element = stack.pop()
        if isinstance(element, CharSet):
            out.append(_char(element, rng))
            continue
        alternatives = grammar.rules[element]
        if len(out) < size:
            pick = rng.randrange(len(alternatives))
        else:
            pick = min(range(len(alternatives)), key=lambda a: grammar.rest[element][a][0])
        stack.extend(reversed(alternatives[pick]))
    return "".join(out)


def _char(step: CharSet, rng: random.Random) -> str:
    """A character of the class, from anywhere in it (never a lone surrogate, which no model writes)."""
    if not step.negated:
        for _ in range(20):
            lo, hi = rng.choice(step.ranges)
            ch = chr(rng.choice([lo, hi, rng.randint(lo, hi)]))
            if not 0xD800 <= ord(ch) <= 0xDFFF:
                return ch
        return step.sample()
    fits = [ch for ch in _ODD if ch in step]
    return rng.choice(fits) if fits else step.sample()


def _grammar(schema: Schema) -> Grammar:
    try:
        return grammar_of(schema)
    except InvalidRequest:  # refused or unsatisfiable: the unit tests name those
        assume(False)
        raise


@pytest.mark.slow  # 200 random schemas, each derived from many times
@settings(CHECKS, max_examples=int(os.environ.get("CONVERTER_EXAMPLES", "200")))
@given(schema=st.one_of(SCHEMAS, st.just(TREE)), seed=st.integers(0, 2**32))
def test_every_derived_text_and_every_shortest_completion_validate(schema: Schema, seed: int) -> None:
    grammar = _grammar(schema)
    check = validator(schema)
    rng = random.Random(seed)
    check.validate(json.loads(grammar.shortest["root"]))
    for _ in range(12):
        text = derive(grammar, rng, rng.choice([0, 8, 40, 200]))
        assert Position(grammar).advance(text).complete, text
        check.validate(json.loads(text))
        prefix = text[: rng.randint(0, len(text))]
        position = Position(grammar).advance(prefix)
        assert not position.dead, prefix
        ending = position.ending()
        assert len(ending) == position.distance
        check.validate(json.loads(prefix + ending))
