"""What every schema-keyword case checks: the grammar takes the valid documents and refuses the
invalid ones, its shortest document validates, and from any point of a valid document the
shortest ending (what the closing watch writes at a tight budget) validates."""

from __future__ import annotations

import json
from typing import Any

from asgi_llm.engines.decoding.gbnf import Grammar, parse
from asgi_llm.engines.decoding.grammar import enforceable, validator
from asgi_llm.engines.decoding.layout import MAX_DEPTH
from asgi_llm.engines.decoding.recognizer import Position
from asgi_llm.engines.decoding.schema_gbnf import schema_gbnf


def text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def layouts(value: Any) -> list[str]:
    """`value` compact, on one line with spaces, and pretty-printed two and four spaces a level
    where no container nests deeper than the grammar breaks lines."""
    pretty = [json.dumps(value, ensure_ascii=False, indent=unit) for unit in (2, 4)]
    return [text(value), json.dumps(value, ensure_ascii=False)] + (pretty if _depth(value) <= MAX_DEPTH else [])


def _depth(value: Any) -> int:
    inner = value.values() if isinstance(value, dict) else value if isinstance(value, list) else None
    return 0 if inner is None else 1 + max((_depth(v) for v in inner), default=0)


def grammar_for(schema: dict[str, Any]) -> Grammar:
    return parse(schema_gbnf(enforceable(schema, "format")))


def takes_and_refuses(schema: dict[str, Any], good: list[Any], bad: list[Any], *, bad_is_invalid: bool = True) -> None:
    """`bad_is_invalid`: each refused document is invalid too (not so where the grammar is
    stricter than the check, as with formats jsonschema reads loosely)."""
    check, grammar = validator(schema), grammar_for(schema)
    for value in good:
        assert check.is_valid(value), value  # the case itself is right
        for written in layouts(value):
            assert Position(grammar).advance(written).complete, written
    for value in bad:
        assert not (bad_is_invalid and check.is_valid(value)), value
        assert not Position(grammar).advance(text(value)).complete, value
    shortest = grammar.shortest["root"]
    assert check.is_valid(json.loads(shortest)), shortest


def closes_from_every_prefix(schema: dict[str, Any], value: Any, cuts: int = 200) -> None:
    check, grammar = validator(schema), grammar_for(schema)
    for written in layouts(value):
        for cut in range(0, len(written) + 1, max(1, len(written) // cuts)):
            position = Position(grammar).advance(written[:cut])
            assert not position.dead, written[:cut]
            ended = written[:cut] + position.ending()
            assert check.is_valid(json.loads(ended)), ended
