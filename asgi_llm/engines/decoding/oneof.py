"""Whether the branches of a `oneOf` can be decoded as an `anyOf`: every document one branch's
grammar writes must fail every other branch, or it would match two and break `oneOf`. Pure.

The test is conservative: each document of the rewritten branch X (what the grammar writes)
fails the client's branch Y when their types cannot meet, when X's values all fail Y, when X is
a closed object without a property Y requires, when X requires a property Y's closed object does
not allow, or when a property X requires has values Y's schema for it never allows (a discriminator). A pair neither test separates is refused.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .automata import intersect, with_length
from .checks import validator
from .extended import as_json_schema
from .forms import ARRAYS, OBJECTS, Choice, Closed, Form, Number, Plain, Text, Values
from .merge import types_of
from .pattern import PatternError

__all__ = ["separated"]

_KINDS = frozenset({"object", "array", "string", "number", "integer", "boolean", "null"})
Resolve = Callable[[Any], Any]  # a client's schema with its top-level `$ref` followed


def separated(written: Form, client: Any, resolve: Resolve, theirs: Form | None = None) -> bool:
    """Whether no document the rewritten `written` allows is valid under the client's `client`
    (`theirs`: the client's branch rewritten, where known)."""
    client = resolve(client)
    if client is True or not isinstance(client, Mapping):
        return client is False
    if isinstance(written, Choice):
        return all(separated(alt, client, resolve) for alt in written.options)
    if not _kinds(written) & _client_kinds(client):
        return True
    if isinstance(written, Values):
        return _all_fail(written.values, client)
    if isinstance(written, Text) and isinstance(theirs, Text) and _exact_string(client, theirs):
        return not _strings_meet(written, theirs)
    return isinstance(written, Closed) and _objects_apart(written, client, resolve)


_STRING_KEYWORDS = frozenset({"type", "minLength", "maxLength", "pattern", "format", "title", "description"})


def _exact_string(client: Mapping[str, Any], theirs: Text) -> bool:
    """Whether the rewritten branch allows exactly the client's strings: a plain string schema,
    its length not capped to unroll its pattern."""
    plain = client.get("type") == "string" and client.keys() <= _STRING_KEYWORDS
    return plain and theirs.most in (None, client.get("maxLength"))


def _strings_meet(a: Text, b: Text) -> bool:
    """Whether two string forms share a string (True where that cannot be told cheaply)."""
    least = max(a.least, b.least)
    ends = [x.most for x in (a, b) if x.most is not None]
    most = min(ends) if ends else None
    if most is not None and least > most:
        return False
    automata = [x.dfa for x in (a, b) if x.dfa is not None]
    if not automata:
        return True
    try:
        both = automata[0] if len(automata) == 1 else intersect(automata[0], automata[1])
        return not with_length(both, least, most if most is not None and most <= 256 else None).empty
    except PatternError:
        return True


def _kinds(written: Form) -> frozenset[str]:
    if isinstance(written, Values):
        kinds = {_kind(v) for v in written.values}
        return frozenset(kinds | ({"number"} if "integer" in kinds else set()))
    if isinstance(written, Plain | Number):
        kind = written.kind
    elif isinstance(written, Text):
        kind = "string"
    elif isinstance(written, OBJECTS):
        kind = "object"
    elif isinstance(written, ARRAYS):
        kind = "array"
    else:
        return _KINDS
    return frozenset({kind, "number"} if kind == "integer" else {kind, "integer"} if kind == "number" else {kind})


def _client_kinds(client: Mapping[str, Any]) -> frozenset[str]:
    kinds = types_of(client)
    if kinds is None or {"anyOf", "oneOf", "allOf", "$ref", "not", "if"} & client.keys():
        return _KINDS
    return frozenset(kinds | ({"integer"} if "number" in kinds else set()))


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
        check = validator(as_json_schema(client))
        return not any(check.is_valid(v) for v in values)
    except Exception:  # noqa: BLE001 (a reference the branch cannot follow on its own: not shown apart)
        return False


def _objects_apart(written: Closed, client: Mapping[str, Any], resolve: Resolve) -> bool:
    declared = written.declared
    if any(name not in declared for name in client.get("required", [])):
        return True  # a closed object without a property the client's branch requires
    theirs = client.get("properties", {})
    shut = client.get("additionalProperties") is False and not client.get("patternProperties")
    if shut and any(name not in theirs for name in written.required):
        return True  # a property the client's closed branch does not allow, always written
    for name in written.required:
        form = declared.get(name)
        if isinstance(form, Values) and name in theirs and _all_fail(form.values, resolve(theirs[name])):
            return True
    return False
