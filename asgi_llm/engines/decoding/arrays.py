"""Arrays in the schema rewrite: items, tuples, `contains` and `uniqueItems`. Pure.

The forms that come out: `items` with `minItems`/`maxItems` (any count: the grammar counts in
blocks); a tuple, `prefixItems` always written in full where the bounds allow, then `items` for
the rest if any may follow (the counts still count the whole array); `x-contains`, the schema
`minContains` items must also meet, written among the others; and `x-unique`, items from a short
list of values, each written at most once and in the list's order.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from .merge import Clash, merge
from .negation import negate
from .walk import Schema, Unsatisfiable, Walker

__all__ = ["rewrite_array"]

log = logging.getLogger("asgi_llm.engine")

_MAX_CONTAINS = 16
_MAX_VALUES = 64  # unique integers from a range are listed, up to this many


def rewrite_array(walk: Walker, node: Schema, where: str, depth: int) -> Schema:
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
        if unique and len(tuple_["prefixItems"]) + (tuple_.get("maxItems", 2) if "items" in tuple_ else 0) > 1:
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
        element, most = {"const": None}, 0
    out: Schema = {"type": "array", "items": element, "minItems": least}
    if most is not None:
        out["maxItems"] = most
    return _unique(walk, out, where) if unique else out


def _tuple(walk: Walker, prefix: list[Any], rest: Any, least: int, most: int | None, where: str, depth: int) -> Schema:
    """The prefix, as much of it as `most` allows; then `rest` (None: not given, so none written
    unless `least` needs them) for the remaining items."""
    count = len(prefix) if most is None else min(len(prefix), most)
    subs: list[Schema] = []
    for i, schema in enumerate(prefix[:count]):
        try:
            subs.append(walk.node(schema, f"{where}/prefixItems/{i}", depth + 1))
        except Unsatisfiable:
            if i < least:
                raise
            break
    out: Schema = {"type": "array", "prefixItems": subs}
    if rest is None and least > len(subs):  # no items of their own: any, only as many as needed
        rest, most = True, least
    if len(subs) == len(prefix) and rest not in (None, False) and (most is None or most > len(subs)):
        try:
            out["items"] = walk.node(rest, f"{where}/items", depth + 1)
        except Unsatisfiable:
            if least > len(subs):
                raise
            return out
        out |= {"minItems": least} if least > len(subs) else {}
        out |= {"maxItems": most} if most is not None else {}
    elif least > len(subs):
        raise walk.no_value(where, f"'minItems' asks for more than the {len(subs)} items allowed")
    return out


def _contains(walk: Walker, node: Schema, least: int, where: str, depth: int) -> Schema:
    """Items of which `minContains` to `maxContains` also meet `contains`. With no most, `x-contains`
    (that many among any items); with one, each item is a hit or a miss (`x-miss`, the items that
    fail `contains`: its negation), and the grammar counts the hits."""
    hits, most = node.get("minContains", 1), node.get("maxContains")
    if max(hits, most or 0) > _MAX_CONTAINS or least > hits:
        raise walk.refuse(where, f"'contains' with 'minItems' above 'minContains' or counts above {_MAX_CONTAINS}")
    if most is not None and most < hits:
        raise walk.no_value(where, "'minContains' is above 'maxContains'")
    items = node.get("items", True)
    element = walk.node(items, f"{where}/items", depth + 1)
    out = {"type": "array", "items": element, "minContains": hits}
    try:
        out["x-contains"] = walk.node(merge([items, node["contains"]]), f"{where}/contains", depth + 1)
    except Unsatisfiable:
        if hits:
            raise
        return {"type": "array", "items": element, "minItems": 0}  # no item can be a hit
    if most is None:
        return out
    try:
        miss = negate(node["contains"], walk.follow)
    except Clash as exc:
        raise walk.refuse(where, f"'maxContains' ({exc})") from None
    try:
        out["x-miss"] = walk.node(merge([items, miss]), f"{where}/items", depth + 1)
    except Unsatisfiable:
        pass  # every item is a hit
    return {**out, "maxContains": most}


def _unique(walk: Walker, out: Schema, where: str) -> Schema:
    """Unique items where the grammar can keep them so: values from a short list, in its order."""
    element = out["items"]
    values = _values(element)
    if values is None or len(values) > _MAX_VALUES:
        raise walk.refuse(where, f"'uniqueItems' on items other than a list of at most {_MAX_VALUES} values")
    if out["minItems"] > len(values):
        raise walk.no_value(where, f"'minItems' asks for more than the {len(values)} distinct values allowed")
    most = min(out.get("maxItems", len(values)), len(values))
    return {
        **out,
        "items": {"enum": values} if len(values) > 1 else {"const": values[0]},
        "maxItems": most,
        "x-unique": True,
    }


def _values(element: Schema) -> list[Any] | None:
    if "const" in element:
        return [element["const"]]
    if "enum" in element:
        return list(element["enum"])
    if element == {"type": "boolean"}:
        return [False, True]
    if element.get("type") == "integer":
        return _whole_numbers(element)
    return [None] if element == {"type": "null"} else None


def _whole_numbers(element: Schema) -> list[Any] | None:
    """The integers a bounded integer schema allows, where they are few enough to list."""
    lows = [math.ceil(element["minimum"])] if "minimum" in element else []
    lows += [math.floor(element["exclusiveMinimum"]) + 1] if "exclusiveMinimum" in element else []
    highs = [math.floor(element["maximum"])] if "maximum" in element else []
    highs += [math.ceil(element["exclusiveMaximum"]) - 1] if "exclusiveMaximum" in element else []
    if not lows or not highs or min(highs) - max(lows) >= _MAX_VALUES:
        return None
    step = element.get("multipleOf", 1)
    return [n for n in range(max(lows), min(highs) + 1) if n % step == 0]
