"""`Closer` under random schemas, budgets and models (hypothesis): whatever a model samples among
the tokens the grammar allows, and whatever budget at least as long as the shortest output, the
output is a JSON document valid under the client's own schema, formats included. And the
`Position` it follows the output with, under random ambiguous grammars, against every parse
stack spelled out."""

from __future__ import annotations

import json
import random
from typing import Any

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from asgi_llm.engines.decoding.gbnf import CharSet, Grammar, GrammarError, parse
from asgi_llm.engines.decoding.grammar import validator
from asgi_llm.engines.decoding.recognizer import Position

from .closing_harness import closer, grammar_of, run, sampler

CHECKS = settings(max_examples=80, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])

Schema = dict[str, Any]
NAMES = ["a", "b", "id", "kind", "tags"]
TEXTS = st.text(alphabet="ab ,:{é", max_size=4)  # no quotes nor backslashes: literals refuse them
PATTERNS = ["^[a-c]{1,3}$", "^x[0-9]+$", "^(ab|cd)*$", "^[A-Z][a-z]?-[0-9]{2}$", "z"]
FORMATS = ["date", "time", "date-time", "email", "ipv4", "uuid", "hostname", "duration"]


@st.composite
def lengths(draw: st.DrawFn, least: str, most: str, top: int) -> Schema:
    """Optional bounds `least` <= `most` below `top`."""
    low = draw(st.integers(0, top))
    high = draw(st.integers(low, top))
    return {k: v for k, v in ((least, low), (most, high)) if draw(st.booleans())}


@st.composite
def numbers(draw: st.DrawFn) -> Schema:
    kind = draw(st.sampled_from(["integer", "number"]))
    values = st.integers(-50, 50) if kind == "integer" else st.sampled_from([-2.5, -1, 0, 0.25, 3, 12.75])
    low, high = sorted(draw(st.lists(values, min_size=2, max_size=2)))
    bounds = {k: v for k, v in (("minimum", low), ("maximum", high)) if draw(st.booleans())}
    return {"type": kind, **bounds}


LEAVES = st.one_of(
    st.builds(lambda b: {"type": "string", **b}, lengths("minLength", "maxLength", 6)),
    st.builds(lambda p: {"type": "string", "pattern": p}, st.sampled_from(PATTERNS)),
    st.builds(lambda f: {"type": "string", "format": f}, st.sampled_from(FORMATS)),
    st.builds(lambda v: {"enum": v}, st.lists(TEXTS, min_size=1, max_size=3, unique=True)),
    st.builds(lambda v: {"const": v}, TEXTS),
    numbers(),
    st.sampled_from([{"type": "boolean"}, {"type": "null"}]),
)


def containers(children: st.SearchStrategy[Schema]) -> st.SearchStrategy[Schema]:
    arrays = st.builds(lambda i, b: {"type": "array", "items": i, **b}, children, lengths("minItems", "maxItems", 3))
    objects = st.dictionaries(st.sampled_from(NAMES), children, min_size=1, max_size=3).flatmap(
        lambda properties: st.builds(
            lambda required: {
                "type": "object",
                "properties": properties,
                "required": required,
                "additionalProperties": False,
            },
            st.lists(st.sampled_from(sorted(properties)), unique=True),
        )
    )
    unions = st.lists(children, min_size=2, max_size=3).map(lambda options: {"anyOf": options})
    return st.one_of(arrays, objects, unions, one_of(children))


def one_of(children: st.SearchStrategy[Schema]) -> st.SearchStrategy[Schema]:
    """`oneOf` branches no value can match twice: objects told apart by a required `kind`."""

    def tagged(options: list[Schema]) -> Schema:
        branches = []
        for i, option in enumerate(options):
            properties = {"kind": {"const": f"k{i}"}, "v": option}
            branches.append({"type": "object", "properties": properties, "required": ["kind"]})
        return {"oneOf": branches}

    return st.lists(children, min_size=2, max_size=3).map(tagged)


SCHEMAS = st.recursive(LEAVES, containers, max_leaves=6)


@CHECKS
@given(schema=SCHEMAS, extra=st.integers(0, 40), seed=st.integers(0, 2**32), stop=st.sampled_from([0, 0.2]))
def test_every_output_is_valid_whatever_the_model_and_budget(
    schema: Schema, extra: int, seed: int, stop: float
) -> None:
    grammar = grammar_of(schema)
    budget = closer(grammar).least() + extra
    text, _, _ = run(grammar, budget, sampler(random.Random(seed), stop))
    validator(schema).validate(json.loads(text))


Frames = tuple[tuple[str, int, int], ...]  # a whole parse stack, its top last


def stacks(grammar: Grammar, text: str) -> set[Frames]:
    """Every parse stack `text` leaves open, each waiting on a character or empty (where the text
    may end): the plain way, exponential where the text is ambiguous."""

    def expand(stack: Frames, found: set[Frames]) -> None:
        while stack and stack[-1][2] == len(grammar.rules[stack[-1][0]][stack[-1][1]]):
            stack = stack[:-1]
        if not stack:
            found.add(stack)
            return
        rule, alt, pos = stack[-1]
        step = grammar.rules[rule][alt][pos]
        if isinstance(step, CharSet):
            found.add(stack)
            return
        for callee in range(len(grammar.rules[step])):
            expand((*stack[:-1], (rule, alt, pos + 1), (step, callee, 0)), found)

    found: set[Frames] = set()
    for alt in range(len(grammar.rules[grammar.root])):
        expand(((grammar.root, alt, 0),), found)
    for ch in text:
        before, found = found, set()
        for stack in before:
            if stack and ch in grammar.rules[stack[-1][0]][stack[-1][1]][stack[-1][2]]:
                rule, alt, pos = stack[-1]
                expand((*stack[:-1], (rule, alt, pos + 1)), found)
    return found


TERMINALS = ['"a"', '"b"', "[ab]", '"c"?', '("a" | "")', '"a"{0,2}']
ELEMENTS = {  # no rule reaches itself before a character, so few grammars are refused
    "root": [*TERMINALS, "x", "y", "x?", '(x "b")*', "y y"],
    "x": [*TERMINALS, "y", "y?", '("b" y)*', '"a" x'],
    "y": TERMINALS,
}


def alternatives(name: str) -> st.SearchStrategy[str]:
    sequences = st.lists(st.sampled_from(ELEMENTS[name]), max_size=3).map(" ".join)
    return st.lists(sequences, min_size=1, max_size=3).map(lambda alts: f"{name} ::= {' | '.join(alts)}")


RULES = st.tuples(*(alternatives(name) for name in ELEMENTS)).map("\n".join)


@CHECKS
@given(rules=RULES, seed=st.integers(0, 2**32))
def test_positions_are_exact_however_ambiguous(rules: str, seed: int) -> None:
    """Against every parse stack spelled out: dead, complete, and the true shortest ending."""
    try:
        grammar = parse(rules)
    except GrammarError:  # a rule that never ends
        assume(False)
    rng, text, position = random.Random(seed), "", Position(grammar)
    for _ in range(8):
        spelled = stacks(grammar, text)
        assert (position.dead, position.complete) == (not spelled, () in spelled), text
        if not spelled:
            break
        rest = grammar.rest
        assert position.distance == min(sum(rest[r][a][p] for r, a, p in stack) for stack in spelled), text
        assert () in stacks(grammar, text + position.ending()), text
        ch = rng.choice("aabbc")
        text, position = text + ch, position.advance(ch)
