"""A request body read into its wire model: pydantic's first complaint as a 400 naming the
param, and a field no model declares refused by name, at any depth. Every adapter's parse
begins here (through `adapters.base`), so no protocol accepts and ignores what it does not know."""

from __future__ import annotations

import functools
import typing
from collections.abc import Collection, Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from asgi_llm.core import InvalidRequest

__all__ = ["refuse_unrecognized", "validate"]

M = TypeVar("M", bound=BaseModel)


def validate(model: type[M], data: Any) -> M:
    """Pydantic at the trust boundary, with the first problem mapped to one `param`."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        param = _param_path(first["loc"])
        raise InvalidRequest(_describe(first, param), param=param or None) from None


def refuse_unrecognized(wire: BaseModel, *, prefix: str = "", handled: Collection[str] = ()) -> None:
    """A field no model here declares is refused, naming it, never accepted and ignored (null
    means "not set" and passes), at any depth: in `wire`, and in every model it holds, in lists
    and maps too. Wire models keep unknown fields (`extra="allow"`) so that a protocol first
    checks the top-level ones it knows (`handled`) with rules and messages of its own."""
    for name, value in (wire.model_extra or {}).items():
        if value is not None and name not in handled:
            param = f"{prefix}{name}"
            raise InvalidRequest(f"Unrecognized parameter: '{param}'; this server does not support it.", param=param)
    for name in _holding_models(type(wire)):
        _refuse_within(getattr(wire, name), f"{prefix}{name}")


def _refuse_within(value: Any, param: str) -> None:
    """`refuse_unrecognized` for what a field holds: a model, or models in a list or a map."""
    if isinstance(value, BaseModel):
        refuse_unrecognized(value, prefix=f"{param}.")
    elif isinstance(value, dict):
        for key, item in value.items():
            _refuse_within(item, f"{param}.{key}")
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            _refuse_within(item, f"{param}[{i}]")


@functools.cache
def _holding_models(model: type[BaseModel]) -> tuple[str, ...]:
    """The fields of `model` whose type may hold a model, so a free JSON value (a schema) is not walked."""
    return tuple(name for name, info in model.model_fields.items() if _mentions_model(info.annotation))


def _mentions_model(annotation: Any) -> bool:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return True
    return any(_mentions_model(arg) for arg in typing.get_args(annotation))


_SCALAR_BRANCHES = frozenset({"str", "int", "float", "bool"})


def _param_path(loc: tuple[int | str, ...]) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part in _SCALAR_BRANCHES or part.startswith(("function-", "tagged-", "literal[", "list[", "dict[")):
            continue  # union branch names, not fields
        else:
            path += f".{part}" if path else part
    return path


def _describe(error: Mapping[str, Any], param: str) -> str:
    where = f" for '{param}'" if param else ""
    if error["type"] == "missing":
        return f"Missing required parameter: '{param}'."
    if error["type"] == "extra_forbidden":
        return f"Unrecognized parameter: '{param}'."
    if error["type"] == "model_type":  # pydantic would name our model's class
        return f"Invalid value{where}: expected an object."
    return f"Invalid value{where}: {error['msg']}."
