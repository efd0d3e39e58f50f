"""The converter under random schemas built from the applicators (hypothesis): whatever a model
samples among the tokens the grammar allows, at any budget from the shortest output up, the
output validates against the client's own schema; so does the shortest document. Schemas the
converter refuses or finds unsatisfiable are skipped (the unit tests name those)."""

from __future__ import annotations

import json
import random

from hypothesis import assume, given
from hypothesis import strategies as st

from asgi_llm.core import InvalidRequest
from asgi_llm.engines.decoding.gbnf import Grammar
from asgi_llm.engines.decoding.grammar import validator

from .closing_harness import closer, grammar_of, run, sampler
from .schema_strategies import CHECKS, SCHEMAS, TREE, Schema


def _compiled(schema: Schema) -> Grammar:
    try:
        return grammar_of(schema)
    except InvalidRequest:  # refused or unsatisfiable: not this test's business
        assume(False)
        raise


@CHECKS
@given(schema=st.one_of(SCHEMAS, st.just(TREE)), extra=st.integers(0, 30), seed=st.integers(0, 2**32))
def test_every_output_and_the_shortest_validate(schema: Schema, extra: int, seed: int) -> None:
    grammar = _compiled(schema)
    check = validator(schema)
    check.validate(json.loads(grammar.shortest["root"]))
    budget = closer(grammar).least() + extra
    text, _, _ = run(grammar, budget, sampler(random.Random(seed), 0.1))
    check.validate(json.loads(text))
