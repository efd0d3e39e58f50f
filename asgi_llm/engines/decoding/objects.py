"""Objects in the schema rewrite: declared properties, extra keys, key rules and dependencies. Pure.

The forms that come out: `Closed` (its properties in order, required ones first, no other keys),
`FreeKeys` (`additionalProperties` for their values, `propertyNames` for the keys' own string)
and `KeyKinds` (free keys under several `patternProperties`). Extra keys beside declared properties are left out: an open object lets a model
ramble on in made-up keys. An optional property no value satisfies is left out, with a warning.
Dependencies become one more `allOf` part per trigger: the trigger absent, or present with what
it brings, and the rewrite merges and branches on them like any other `anyOf`.
"""

from __future__ import annotations

import itertools
import logging
import re
from collections.abc import Mapping
from typing import Any

from .forms import Closed, Form, FreeKeys, KeyKinds, Plain, Text, Values
from .merge import Clash, merge
from .pattern import PatternError
from .walk import Schema, Unsatisfiable, Walker

__all__ = ["DEPENDENCIES", "dependencies", "rewrite_object"]

log = logging.getLogger("asgi_llm.engine")

DEPENDENCIES = frozenset({"dependencies", "dependentRequired", "dependentSchemas"})
_MAX_PATTERNS = 3  # several patterns of free keys make a kind of key per set of them (2^n - 1)
_MAX_TRIGGERS = 6  # optional properties whose dependencies branch the object (2^n branches at most)


def dependencies(node: Schema) -> Schema:
    """`node` with its dependencies as `allOf` parts: for each trigger, absent or present with its due."""
    due: dict[str, list[Any]] = {}
    for key in sorted(DEPENDENCIES & node.keys()):
        for name, need in node.pop(key).items():
            due.setdefault(name, []).append({"required": need} if isinstance(need, list) else need)
    required = set(node.get("required", []))
    parts = [merge(need) for name, need in due.items() if name in required]
    optional = [name for name in due if name not in required]
    if len(optional) > _MAX_TRIGGERS:
        raise Clash(f"Dependencies on more than {_MAX_TRIGGERS} optional properties")
    parts += [
        {"x-cases": [{"properties": {name: False}}, merge([{"required": [name]}, *due[name]])]} for name in optional
    ]
    return {**node, "allOf": [*node.get("allOf", []), *parts]} if parts else node


def rewrite_object(walk: Walker, node: Schema, where: str, depth: int) -> Form:
    if "x-outside" in node:  # a key outside these (a `not` of a closed object): one of ours, as branches
        return _outside(walk, node, where, depth)
    properties: dict[str, Any] = dict(node.get("properties", {}))
    required: list[str] = list(node.get("required", []))
    patterns: Mapping[str, Any] = node.get("patternProperties", {})
    extra = node.get("additionalProperties", True)
    names = node.get("propertyNames", True)
    keys = _key_rule(walk, names, where)
    if isinstance(keys, list):  # names from an enum: declared properties, of the schema a key of theirs takes
        named = {name: properties.get(name, _undeclared(name, patterns, extra)) for name in keys}
        properties = {name: sub for name, sub in named.items() if sub is not False}
        extra, patterns = False, {}
    for name in required:  # a required name nothing declares takes the extra keys' schema
        if name not in properties:
            properties[name] = _undeclared(name, patterns, extra)
    unsafe = [name for name in properties if '"' in name or "\\" in name or not name.isprintable()]
    if unsafe:
        raise walk.refuse(where, f"Property names {unsafe} with backslashes, quotes or control characters")
    least, most = node.get("minProperties", 0), node.get("maxProperties")
    if most is not None and least > most:
        raise walk.no_value(where, "'minProperties' is above 'maxProperties'")
    closed = extra is False and not patterns
    if properties or closed or ("properties" in node and "additionalProperties" not in node):
        subs = _declared(walk, properties, required, patterns, keys, where, depth)
        if least > len(subs):
            raise walk.no_value(where, f"'minProperties' asks for more than the {len(subs)} properties allowed")
        if most is not None and len(required) > most:
            raise walk.no_value(where, f"'maxProperties' is below the {len(required)} properties required")
        return Closed(tuple(subs.items()), tuple(required), least, most)
    return _free_keys(walk, patterns, extra, names, keys, (least, most), where, depth)


def _outside(walk: Walker, node: Schema, where: str, depth: int) -> Form:
    """An object with some key outside `x-outside`: of its declared properties (the only keys the
    grammar writes where there are some), one of those outside is present."""
    outside = set(node.pop("x-outside"))
    declared = list(node.get("properties", {})) + [
        n for n in node.get("required", []) if n not in node.get("properties", {})
    ]
    if not declared:
        raise walk.refuse(where, "'not' of a closed object beside free keys")
    names = [name for name in declared if name not in outside]
    if not names:
        raise walk.no_value(where, "no declared key is outside the ones another branch allows")
    return walk.node({**node, "x-cases": [{"required": [name]} for name in names]}, where, depth + 1)


def _undeclared(name: str, patterns: Mapping[str, Any], extra: Any) -> Any:
    matched = [s for p, s in patterns.items() if re.search(p, name)]
    return merge(matched) if matched else extra


def _declared(
    walk: Walker,
    properties: Mapping[str, Any],
    required: list[str],
    patterns: Mapping[str, Any],
    keys: Text | list[str] | None,
    where: str,
    depth: int,
) -> dict[str, Form]:
    subs = {}
    for name, sub in properties.items():
        at = f"{where}/properties/{name}"
        if sub is False and name not in required:
            continue  # a property the schema says must be absent
        try:
            if isinstance(keys, Text) and not keys.accepts(name):
                raise walk.no_value(at, "the name breaks 'propertyNames'")
            matched = [s for p, s in patterns.items() if re.search(p, name)]
            subs[name] = walk.all_of([sub, *matched], at, depth + 1)
        except Unsatisfiable as exc:
            if name in required:
                raise
            log.warning("left out of the grammar for %s: %s", walk.param, exc)
    return subs


Bounds = tuple[int, int | None]  # the least and most properties


def _free_keys(
    walk: Walker,
    patterns: Mapping[str, Any],
    extra: Any,
    names: Any,
    keys: Text | list[str] | None,
    bounds: Bounds,
    where: str,
    depth: int,
) -> Form:
    least, most = bounds
    if least > 1:
        raise walk.refuse(where, "'minProperties' above 1 on an object with free keys (keys may repeat)")
    if len(patterns) > 1:
        return _regions(walk, patterns, names, bounds, where, depth)
    if patterns:
        ((pattern, extra),) = patterns.items()
        keys = _key(walk, names, [pattern], [], where)
    if extra is False:
        return Closed(())
    if extra is True and keys is None and bounds == (0, None):
        return Plain("object")
    try:
        value = walk.node(extra, f"{where}/additionalProperties", depth + 1)
    except Unsatisfiable as exc:
        if least:
            raise
        log.warning("left out of the grammar for %s: %s", walk.param, exc)
        return Closed(())
    return FreeKeys(value, keys if isinstance(keys, Text) else None, least, most)


def _regions(walk: Walker, patterns: Mapping[str, Any], names: Any, bounds: Bounds, where: str, depth: int) -> Form:
    """Free keys under several `patternProperties`: one kind of key for each set of patterns a key
    may match and the others it must not, its value held to all of theirs (`KeyKinds`)."""
    if len(patterns) > _MAX_PATTERNS:
        raise walk.refuse(
            where, f"More than {_MAX_PATTERNS} 'patternProperties' on an object without declared properties"
        )
    items = list(patterns.items())
    pairs = []
    for size in range(1, len(items) + 1):
        for chosen in itertools.combinations(range(len(items)), size):
            matched = [items[i][0] for i in chosen]
            unmatched = [p for i, (p, _) in enumerate(items) if i not in chosen]
            try:
                automaton = walk.automaton(Text(patterns=tuple(matched), antipatterns=tuple(unmatched)))
            except PatternError as exc:
                raise walk.refuse(where, f"'patternProperties' ({exc})") from None
            if automaton is not None and automaton.empty:
                continue  # no key matches just these
            try:
                key = _key(walk, names, matched, unmatched, where)
                value = walk.all_of([items[i][1] for i in chosen], f"{where}/patternProperties", depth + 1)
            except Unsatisfiable:
                continue  # keys of this kind cannot be written
            pairs.append((key, value))
    if not pairs and bounds[0]:
        raise walk.no_value(where, "no key can be written under its 'patternProperties'")
    if not pairs:
        return Closed(())
    return KeyKinds(tuple(pairs), *bounds)


def _key(walk: Walker, names: Any, matched: list[str], unmatched: list[str], where: str) -> Text:
    """The string form of a kind of key: a `propertyNames` string matching `matched` and none of `unmatched`."""
    form = walk.all_of([names, {"type": "string", "pattern": matched, "x-antipatterns": unmatched}], where, 0)
    if not isinstance(form, Text):
        raise walk.refuse(where, "'propertyNames' other than a string schema beside 'patternProperties'")
    return form


def _key_rule(walk: Walker, names: Any, where: str) -> Text | list[str] | None:
    """`propertyNames` as a string form, or the list of names it allows; None for any name."""
    if names is True or names == {}:
        return None
    try:
        rule = walk.node(names, f"{where}/propertyNames", 0)
    except Unsatisfiable:
        return []  # no name is allowed: no keys
    if isinstance(rule, Values):
        return [v for v in rule.values if isinstance(v, str)]
    if rule == Plain("string"):
        return None
    if not isinstance(rule, Text):
        raise walk.refuse(where, "'propertyNames' other than a string schema or an enum")
    return rule
