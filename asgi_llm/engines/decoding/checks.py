"""Checking JSON Schemas, and values against them, formats included. Pure.

A schema is read under the draft its `$schema` names (2020-12 otherwise); values are checked
with that draft's format checks, and ours where jsonschema has none without extra packages
(`formats.format_checker`): what the grammar enforces is what is checked.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from jsonschema.protocols import Validator
from jsonschema.validators import validator_for

from ...core.errors import InvalidRequest
from .formats import format_checker

__all__ = ["Validator", "check_schema", "checked_formats", "validator"]


def _validator_class(schema: Mapping[str, Any]) -> Any:
    """The draft `$schema` names; 2020-12 when it names none this library knows."""
    if not isinstance(schema.get("$schema", ""), str):
        return Draft202012Validator
    return validator_for(schema, default=Draft202012Validator)


def check_schema(schema: Any, param: str) -> None:
    """`InvalidRequest` naming `param` unless `schema` is a valid JSON Schema object."""
    if not isinstance(schema, Mapping):
        raise InvalidRequest(f"'{param}' must be a JSON Schema object.", param=param)
    try:
        _validator_class(schema).check_schema(dict(schema))
    except SchemaError as exc:
        where = "/".join(str(p) for p in exc.path)
        at = f" at '{where}'" if where else ""
        raise InvalidRequest(f"'{param}' is not a valid JSON Schema{at}: {exc.message}", param=param) from None


def validator(schema: Mapping[str, Any]) -> Validator:
    """Checks values (formats included) against a schema already passed by `check_schema`."""
    cls = _validator_class(schema)
    checker: Validator = cls(schema, format_checker=format_checker(cls.FORMAT_CHECKER))
    return checker


def checked_formats(schema: Mapping[str, Any]) -> frozenset[str]:
    """The formats values are checked for under `schema`'s draft."""
    return frozenset(format_checker(_validator_class(schema).FORMAT_CHECKER).checkers)
