"""Structured output, as every protocol's parse asks for it: any JSON object, or JSON valid under a schema;
and tools' parameter schemas and names.

A schema is checked here (against its draft's meta-schema), so a bad one is a 400 naming the field it came in; whether
decoding can enforce it is the engine's to say (also a 400, naming the same field).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from jsonschema import Draft202012Validator  # type: ignore[import-untyped, unused-ignore]
from jsonschema.exceptions import SchemaError  # type: ignore[import-untyped, unused-ignore]
from jsonschema.validators import validator_for  # type: ignore[import-untyped, unused-ignore]

from asgi_llm.core import InvalidRequest, OutputFormat

__all__ = ["checked_name", "json_object", "json_schema", "tool_names", "tool_parameters"]

NAME = re.compile(r"[A-Za-z0-9_-]+")
"""A tool's or a response format's name: letters, digits, '_' and '-', as OpenAI and Anthropic
define it; OpenAI takes 64 of them (the default `longest`), Anthropic 128 (MCP tools' names,
`mcp__server__tool`, run long)."""


def json_object(param: str) -> OutputFormat:
    return OutputFormat(kind="json_object", param=param)


def json_schema(schema: Any, param: str, *, name: str | None = None, strict: bool | None = None) -> OutputFormat:
    """`schema` must be a valid JSON Schema object; `param` is where it sits in the request."""
    _check(schema, param)
    return OutputFormat(kind="json_schema", param=param, schema=dict(schema), name=name, strict=bool(strict))


def checked_name(name: str, param: str, *, longest: int = 64) -> str:
    """`name` where it matches `NAME` in at most `longest` characters; a 400 naming `param` otherwise."""
    if NAME.fullmatch(name) is None or len(name) > longest:
        raise InvalidRequest(
            f"Invalid value for '{param}': {name!r}; a name is 1 to {longest} letters, digits, '_' or '-'.",
            param=param,
        )
    return name


def tool_names(names: Sequence[str], param: Callable[[int], str], *, pattern: bool = True, longest: int = 64) -> None:
    """Each tool's name told apart from the others' (a call names its tool, so two of one name
    would leave the call to either), and, with `pattern`, matching `NAME` in at most `longest`
    characters; `param(i)` is where tool `i`'s name sits in the request."""
    seen: set[str] = set()
    for i, name in enumerate(names):
        if pattern:
            checked_name(name, param(i), longest=longest)
        if name in seen:
            raise InvalidRequest(f"Tool names must be unique: '{name}' is given twice.", param=param(i))
        seen.add(name)


def tool_parameters(schema: Any, param: str) -> dict[str, Any]:
    """A tool's parameters (none: an empty object); a valid JSON Schema object when given."""
    if schema is None:
        return {}
    _check(schema, param)
    return dict(schema)


def _check(schema: Any, param: str) -> None:
    if not isinstance(schema, Mapping):
        raise InvalidRequest(f"'{param}' must be a JSON Schema object.", param=param)
    draft = schema.get("$schema", "")
    cls = validator_for(schema, default=Draft202012Validator) if isinstance(draft, str) else Draft202012Validator
    try:
        cls.check_schema(dict(schema))
    except SchemaError as exc:
        where = "/".join(str(p) for p in exc.path)
        at = f" at '{where}'" if where else ""
        raise InvalidRequest(f"'{param}' is not a valid JSON Schema{at}: {exc.message}", param=param) from None
