"""Arrays in the schema rewrite: items, tuples, `contains` and `uniqueItems`. Pure.

The forms that come out: `Items` with their bounds (any count: the grammar counts in blocks);
a `Tuple`, `prefixItems` always written in full where the bounds allow, then `items` for the
rest if any may follow (the counts still count the whole array); `Containing`, the schema
`minContains` items must also meet, written among the others, or `CountedHits` where
`maxContains` bounds them; and `Unique`, items from a short list of values, each written at
most once and in the list's order.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from .forms import Containing, CountedHits, Form, Items, Number, Plain, Tuple, Unique, Values, values_of
from .merge import Clash
from .negation import negate
from .walk import Schema, Unsatisfiable, Walker

__all__ = ["rewrite_array"]

log = logging.getLogger("asgi_llm.engine")

_MAX_CONTAINS = 16
_MAX_VALUES = 64  # unique integers from a range are listed, up to this many


def rewrite_array(walk: Walker, node: Schema, where: str, depth: int) -> Form:
    items, prefix = node.get("items"), node.get("prefixItems")
    least, most = node.get("minItems", 0), node.get("maxItems")
    if most is not None and least > most:
        raise walk.no_value(where, "'minItems' is above 'maxItems'")
    if prefix is None and isinstance(items, list):  # draft 7 tuples
        prefix, items = items, node.get("additionalItems")
    unique = bool(node.get("uniqueItems")) and (most is None or most > 1)
    counted = "contains" in node and (node.get("minContains", 1) > 0 or "maxContains" in node)
    if prefix is not None and counted:
        raise walk.refuse(where, "'contains' beside a tuple")
    if prefix is not None:
        tuple_ = _tuple(walk, prefix, items, least, most, where, depth)
        if unique and len(tuple_.prefix) + ((tuple_.most or 2) if tuple_.rest is not None else 0) > 1:
            raise walk.refuse(where, "'uniqueItems' on a tuple")
        return tuple_
    if counted:
        if unique or most is not None:
            raise walk.refuse(where, "'contains' beside 'maxItems' or 'uniqueItems'")
        return _contains(walk, node, least, where, depth)
    try:
        element = walk.node(True if items is None else items, f"{where}/items", depth + 1)
    except Unsatisfiable as exc:
        if least:
            raise
        log.warning("left out of the grammar for %s: %s", walk.param, exc)
        return Items(values_of([None]), 0, 0)
    return _unique(walk, element, least, most, where) if unique else Items(element, least, most)


def _tuple(walk: Walker, prefix: list[Any], rest: Any, least: int, most: int | None, where: str, depth: int) -> Tuple:
    """The prefix, as much of it as `most` allows; then `rest` (None: not given, so none written
    unless `least` needs them) for the remaining items."""
    count = len(prefix) if most is None else min(len(prefix), most)
    subs: list[Form] = []
    for i, schema in enumerate(prefix[:count]):
        try:
            subs.append(walk.node(schema, f"{where}/prefixItems/{i}", depth + 1))
        except Unsatisfiable:
            if i < least:
                raise
            break
    if rest is None and least > len(subs):  # no items of their own: any, only as many as needed
        rest, most = True, least
    if len(subs) == len(prefix) and rest not in (None, False) and (most is None or most > len(subs)):
        try:
            more = walk.node(rest, f"{where}/items", depth + 1)
        except Unsatisfiable:
            if least > len(subs):
                raise
            return Tuple(tuple(subs))
        return Tuple(tuple(subs), more, least if least > len(subs) else 0, most)
    if least > len(subs):
        raise walk.no_value(where, f"'minItems' asks for more than the {len(subs)} items allowed")
    return Tuple(tuple(subs))


def _contains(walk: Walker, node: Schema, least: int, where: str, depth: int) -> Form:
    """Items of which `minContains` to `maxContains` also meet `contains`. With no most,
    `Containing` (that many among any items); with one, each item is a hit or a miss (the items
    that fail `contains`: its negation), and the grammar counts the hits (`CountedHits`)."""
    hits, most = node.get("minContains", 1), node.get("maxContains")
    if max(hits, most or 0) > _MAX_CONTAINS or least > hits:
        raise walk.refuse(where, f"'contains' with 'minItems' above 'minContains' or counts above {_MAX_CONTAINS}")
    if most is not None and most < hits:
        raise walk.no_value(where, "'minContains' is above 'maxContains'")
    items = node.get("items", True)
    element = walk.node(items, f"{where}/items", depth + 1)
    try:
        hit = walk.all_of([items, node["contains"]], f"{where}/contains", depth + 1)
    except Unsatisfiable:
        if hits:
            raise
        return Items(element)  # no item can be a hit
    if most is None:
        return Containing(element, hit, hits)
    try:
        miss = negate(node["contains"], walk.follow)
    except Clash as exc:
        raise walk.refuse(where, f"'maxContains' ({exc})") from None
    try:
        missed: Form | None = walk.all_of([items, miss], f"{where}/items", depth + 1)
    except Unsatisfiable:
        missed = None  # every item is a hit
    return CountedHits(hit, missed, hits, most)


def _unique(walk: Walker, element: Form, least: int, most: int | None, where: str) -> Unique:
    """Unique items where the grammar can keep them so: values from a short list, in its order."""
    values = _values(element)
    if values is None or len(values) > _MAX_VALUES:
        raise walk.refuse(where, f"'uniqueItems' on items other than a list of at most {_MAX_VALUES} values")
    if least > len(values):
        raise walk.no_value(where, f"'minItems' asks for more than the {len(values)} distinct values allowed")
    return Unique(values_of(values), least, min(len(values) if most is None else most, len(values)))


def _values(element: Form) -> list[Any] | None:
    if isinstance(element, Values):
        return element.values
    if element == Plain("boolean"):
        return [False, True]
    if isinstance(element, Number) and element.kind == "integer":
        return _whole_numbers(element.keywords)
    return [None] if element == Plain("null") else None


def _whole_numbers(bounds: dict[str, Any]) -> list[Any] | None:
    """The integers a bounded integer schema allows, where they are few enough to list."""
    lows = [math.ceil(bounds["minimum"])] if "minimum" in bounds else []
    lows += [math.floor(bounds["exclusiveMinimum"]) + 1] if "exclusiveMinimum" in bounds else []
    highs = [math.floor(bounds["maximum"])] if "maximum" in bounds else []
    highs += [math.ceil(bounds["exclusiveMaximum"]) - 1] if "exclusiveMaximum" in bounds else []
    if not lows or not highs or min(highs) - max(lows) >= _MAX_VALUES:
        return None
    step = bounds.get("multipleOf", 1)
    return [n for n in range(max(lows), min(highs) + 1) if n % step == 0]
