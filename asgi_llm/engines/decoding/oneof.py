"""Whether the branches of a `oneOf` can be decoded as an `anyOf`: every document one branch's
grammar writes must fail every other branch, or it would match two and break `oneOf`. Pure.

The test is conservative: each document of the rewritten branch X (what the grammar writes)
fails the client's branch Y when their types cannot meet, when X's values all fail Y, when X is
a closed object without a property Y requires, or when a property X requires has values Y's
schema for it never allows (a discriminator). A pair neither test separates is refused.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .automata import intersect, with_length
from .checks import validator
from .merge import types_of
from .pattern import PatternError
from .strings import string_dfa
from .walk import Schema

__all__ = ["separated"]

_KINDS = frozenset({"object", "array", "string", "number", "integer", "boolean", "null"})
Resolve = Callable[[Any], Any]  # a client's schema with its top-level `$ref` followed


def separated(written: Schema, client: Any, resolve: Resolve, theirs: Schema | None = None) -> bool:
    """Whether no document the rewritten `written` allows is valid under the client's `client`
    (`theirs`: the client's branch rewritten, where known)."""
    client = resolve(client)
    if client is True or not isinstance(client, Mapping):
        return client is False
    if list(written) == ["anyOf"]:
        return all(separated(alt, client, resolve) for alt in written["anyOf"])
    if not _kinds(written) & _client_kinds(client):
        return True
    values = _values(written)
    if values is not None:
        return _all_fail(values, client)
    if written.get("type") == "string" and theirs is not None and _exact_string(client, theirs):
        return not _strings_meet(written, theirs)
    return written.get("type") == "object" and _objects_apart(written, client, resolve)


_STRING_KEYWORDS = frozenset({"type", "minLength", "maxLength", "pattern", "format", "title", "description"})


def _exact_string(client: Mapping[str, Any], theirs: Schema) -> bool:
    """Whether the rewritten branch allows exactly the client's strings (a plain string schema)."""
    return client.get("type") == "string" and client.keys() <= _STRING_KEYWORDS and theirs.get("type") == "string"


def _strings_meet(a: Schema, b: Schema) -> bool:
    """Whether two rewritten string schemas share a string (True where that cannot be told cheaply)."""
    least = max(a.get("minLength", 0), b.get("minLength", 0))
    ends = [x["maxLength"] for x in (a, b) if "maxLength" in x]
    most = min(ends) if ends else None
    if most is not None and least > most:
        return False
    if most is not None and most > 256:
        most = None
    try:
        automata = [d for d in (string_dfa(_bare(a)), string_dfa(_bare(b))) if d is not None]
        if not automata:
            return True
        both = automata[0] if len(automata) == 1 else intersect(automata[0], automata[1])
        return not with_length(both, least, most).empty
    except PatternError:
        return True


def _bare(schema: Schema) -> Schema:
    return {k: v for k, v in schema.items() if k not in ("minLength", "maxLength")}


def _kinds(written: Schema) -> frozenset[str]:
    values = _values(written)
    if values is not None:
        return frozenset(_kind(v) for v in values) | (
            {"number"} if any(_kind(v) == "integer" for v in values) else set()
        )
    kind = written.get("type")
    if kind is None:
        return _KINDS
    return frozenset({kind, "number"} if kind == "integer" else {kind, "integer"} if kind == "number" else {kind})


def _client_kinds(client: Mapping[str, Any]) -> frozenset[str]:
    kinds = types_of(client)
    if kinds is None or {"anyOf", "oneOf", "allOf", "$ref", "not", "if"} & client.keys():
        return _KINDS
    return frozenset(kinds | ({"integer"} if "number" in kinds else set()))


def _values(written: Schema) -> list[Any] | None:
    if "const" in written:
        return [written["const"]]
    return list(written["enum"]) if "enum" in written else None


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
        return "integer"
    names: dict[type, str] = {str: "string", list: "array", dict: "object"}
    return names.get(type(value), "number")


def _all_fail(values: list[Any], client: Mapping[str, Any]) -> bool:
    try:
        check = validator(dict(client))
        return not any(check.is_valid(v) for v in values)
    except Exception:  # noqa: BLE001 (a reference the branch cannot follow on its own: not shown apart)
        return False


def _objects_apart(written: Schema, client: Mapping[str, Any], resolve: Resolve) -> bool:
    declared = written.get("properties")
    if declared is not None and any(name not in declared for name in client.get("required", [])):
        return True  # a closed object without a property the client's branch requires
    theirs = client.get("properties", {})
    for name in written.get("required", []):
        values = _values(declared[name]) if declared is not None and name in declared else None
        if values is not None and name in theirs and _all_fail(values, resolve(theirs[name])):
            return True
    return False
