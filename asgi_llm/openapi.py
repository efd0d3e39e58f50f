"""The OpenAPI 3.1 document of an app's own routes, built from what its adapters declare.

Request bodies come from each route's pydantic wire model (`route.body`), JSON replies from
the return annotation of its render function where that is a TypedDict, error replies from
the protocol's own `render_error`. Only the routes the app really serves are listed, so the
document changes with the adapters, the health and metrics paths, and the web page.
"""

from __future__ import annotations

import json
import re
import sys
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Union, get_args, get_origin

from pydantic.json_schema import models_json_schema

from .adapters.base import Adapter, CountRoute, EmbedRoute, GenerateRoute, Route, TokenizerRoute, required_header
from .core import InvalidRequest

__all__ = ["AppRoute", "openapi_document", "served_at"]

_REF = "#/components/schemas/{model}"
_SCALARS: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}
_LONG_PREFIX = "asgi_llm__adapters__"
_PARAM = re.compile(r"\{(\w+)(?::path)?\}")


@dataclass(frozen=True)
class AppRoute:
    """A route of the app itself rather than of a protocol (health, metrics, this document, the page)."""

    path: str
    operation_id: str
    summary: str
    media_type: str = "application/json"
    operator: bool = False
    """Only operator keys may read it."""
    keyless: bool = False
    """Served before any key is asked for (the web page's own files)."""
    method: str = "GET"
    body: Mapping[str, Any] | None = None
    """The JSON Schema of its request body, where it takes one."""


def openapi_document(
    adapters: Sequence[Adapter],
    app_routes: Sequence[AppRoute],
    *,
    public: frozenset[str] | None,
    title: str = "asgi_llm",
    version: str = "0.1.0",
) -> dict[str, Any]:
    """The document; `public` are the paths that need no key (None: no key is ever asked for)."""
    bodies = _bodies(adapters)
    keymap, defs = _readable(models_json_schema([(model, "validation") for model in bodies], ref_template=_REF))
    components: dict[str, Any] = dict(defs.get("$defs", {}))
    paths: dict[str, dict[str, Any]] = {}
    for (path, method), (adapter, route, alternates) in _operations(adapters).items():
        operation = _operation(adapter, route, method, alternates, components)
        if route.body is not None:
            operation["requestBody"] = {
                "required": True,
                "content": {"application/json": {"schema": keymap[(route.body, "validation")]}},
            }
        _secure(operation, route.path, public)
        paths.setdefault(path, {})[method.lower()] = operation
    for extra in app_routes:  # after the protocols' routes, as in the router
        operation = _app_operation(extra)
        _secure(operation, "" if extra.keyless else extra.path, public, keyless=extra.keyless)
        paths.setdefault(_template(extra.path), {}).setdefault(extra.method.lower(), operation)
    doc: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {"title": title, "version": version},
        "paths": paths,
        "components": {"schemas": components},
    }
    if public is not None:
        doc["components"]["securitySchemes"] = {
            "bearer": {"type": "http", "scheme": "bearer", "description": "Authorization: Bearer KEY"},
            "apiKey": {"type": "apiKey", "in": "header", "name": "x-api-key"},
        }
        doc["security"] = [{"bearer": []}, {"apiKey": []}]
    return doc


def served_at(document: Mapping[str, Any], root_path: str) -> dict[str, Any]:
    """The document as seen below `root_path` (where the host mounted the app)."""
    return {**document, "servers": [{"url": root_path.rstrip("/") or "/"}]}


def _readable(generated: Any) -> Any:
    """Pydantic names a model whose name another shares by its whole module path
    (`asgi_llm__adapters__openai__chat__ChatBody`); below the adapters is enough (`openai__chat__ChatBody`)."""
    keymap, defs = generated
    text = json.dumps(defs).replace(_LONG_PREFIX, "")
    return {key: json.loads(json.dumps(ref).replace(_LONG_PREFIX, "")) for key, ref in keymap.items()}, json.loads(text)


def _bodies(adapters: Sequence[Adapter]) -> list[type[Any]]:
    found = [route.body for adapter in adapters for route in adapter.routes if route.body is not None]
    return list(dict.fromkeys(found))


def _operations(adapters: Sequence[Adapter]) -> dict[tuple[str, str], tuple[Adapter, Route, list[tuple[Adapter, str]]]]:
    """Per path and method, the route the router picks for a request without special headers
    (the first); routes reached only with a header (Anthropic's `/models`) are noted on it."""
    chosen: dict[tuple[str, str], tuple[Adapter, Route, list[tuple[Adapter, str]]]] = {}
    by_header: list[tuple[Adapter, Route, str]] = []
    for adapter in adapters:
        for route in adapter.routes:
            header = required_header(route)
            if header is not None:
                by_header.append((adapter, route, header))
                continue
            for method in route.methods:
                chosen.setdefault((_template(route.path), method), (adapter, route, []))
    for adapter, route, header in by_header:
        for method in route.methods:
            key = (_template(route.path), method)
            if key in chosen:
                chosen[key][2].append((adapter, header))
            else:
                chosen[key] = (adapter, route, [])
    return chosen


def _template(path: str) -> str:
    return _PARAM.sub(r"{\1}", path)


def _operation(
    adapter: Adapter, route: Route, method: str, alternates: list[tuple[Adapter, str]], components: dict[str, Any]
) -> dict[str, Any]:
    path = _template(route.path)
    operation: dict[str, Any] = {
        "operationId": f"{adapter.name}_{method.lower()}_{_slug(path)}",
        "tags": [adapter.name],
        "summary": f"{method} {path} ({adapter.name})",
        "parameters": _parameters(route),
        "responses": {"200": _success(route, components), "default": _error(adapter)},
    }
    description = _module_doc(route)
    for other, header in alternates:
        description += f" With the `{header}` header, answered in the {other.name} protocol's shape instead."
        operation["parameters"].append(
            {"name": header, "in": "header", "required": False, "schema": {"type": "string"}}
        )
    if description:
        operation["description"] = description.strip()
    return operation


def _parameters(route: Route) -> list[dict[str, Any]]:
    params: list[dict[str, Any]] = []
    for match in _PARAM.finditer(route.path):
        param: dict[str, Any] = {"name": match.group(1), "in": "path", "required": True, "schema": {"type": "string"}}
        if match.group(0).endswith(":path}"):
            param["description"] = "May contain slashes."
        params.append(param)
    header = required_header(route)
    if header is not None:
        params.append({"name": header, "in": "header", "required": True, "schema": {"type": "string"}})
    return params


def _success(route: Route, components: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(route, (GenerateRoute, EmbedRoute, CountRoute, TokenizerRoute)):
        return {"description": "The protocol's reply."}
    content: dict[str, Any] = {"application/json": {"schema": _returned(route.render, components)}}
    description = "The reply."
    if isinstance(route, GenerateRoute):
        media_type = getattr(route.encoder, "media_type", None)
        if media_type is not None:
            content[media_type] = {"schema": {"type": "string"}}
            description = f"The reply; with `stream`, a stream of events as {media_type}."
    return {"description": description, "content": content}


def _error(adapter: Adapter) -> dict[str, Any]:
    _, example = adapter.render_error(InvalidRequest("Invalid value for 'model'.", param="model"))
    return {
        "description": f"An error, in the {adapter.name} protocol's own envelope.",
        "content": {"application/json": {"schema": {"type": "object"}, "example": example}},
    }


def _app_operation(route: AppRoute) -> dict[str, Any]:
    responses: dict[str, Any] = {"200": {"description": route.summary, "content": {route.media_type: {}}}}
    if route.operator:
        responses["403"] = {"description": "The key is not an operator key."}
    params = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
        for name in _PARAM.findall(route.path)
    ]
    operation: dict[str, Any] = {
        "operationId": route.operation_id,
        "tags": ["asgi_llm"],
        "summary": route.summary,
        "parameters": params,
        "responses": responses,
    }
    if route.body is not None:
        operation["requestBody"] = {"required": True, "content": {"application/json": {"schema": dict(route.body)}}}
    return operation


def _secure(operation: dict[str, Any], path: str, public: frozenset[str] | None, *, keyless: bool = False) -> None:
    if public is not None and (keyless or "/" + path.strip("/") in public):
        operation["security"] = []
    elif public is not None:
        operation["responses"]["401"] = {"description": "No key, or an unknown one."}


def _slug(path: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", path).strip("_") or "root"


def _module_doc(route: Route) -> str:
    handler: Any = getattr(route, "parse", None) or getattr(route, "handle", None)
    module = sys.modules.get(getattr(handler, "__module__", ""), None)
    doc = (module.__doc__ or "") if module is not None else ""
    return doc.strip().split("\n\n")[0].replace("\n", " ")


def _returned(render: Callable[..., Any], components: dict[str, Any]) -> dict[str, Any]:
    """The JSON schema of what `render` is annotated to return (an object where that is unknown)."""
    try:
        hints = typing.get_type_hints(render)
    except (NameError, TypeError, AttributeError):  # an annotation that does not resolve: an object, no more
        return {"type": "object"}
    return _Shapes(components).schema(hints.get("return", dict)) or {"type": "object"}


class _Shapes:
    """JSON schemas for the TypedDict-built wire shapes (pydantic wants typing_extensions'
    TypedDict before Python 3.12; the wire shapes use the standard library's), each TypedDict
    once under `components`."""

    def __init__(self, components: dict[str, Any]) -> None:
        self._components = components
        self._owners: dict[str, Any] = {}

    def schema(self, tp: Any) -> dict[str, Any]:
        origin, args = get_origin(tp), get_args(tp)
        if tp is Any:
            return {}
        if tp is None or tp is type(None):
            return {"type": "null"}
        if tp in _SCALARS:
            return {"type": _SCALARS[tp]}
        if typing.is_typeddict(tp):
            return self._typed_dict(tp)
        if origin is Literal:
            return {"enum": list(args)}
        if origin in (Union, types.UnionType):
            return {"anyOf": [self.schema(arg) for arg in args]}
        if origin in (list, tuple, Sequence):
            return {"type": "array", "items": self.schema(args[0]) if args else {}}
        if origin in (dict, Mapping) or tp is dict:
            return {"type": "object", "additionalProperties": self.schema(args[1]) if args else {}}
        return {}

    def _typed_dict(self, tp: Any) -> dict[str, Any]:
        name = tp.__name__
        if self._owners.get(name, tp) is not tp or (name in self._components and name not in self._owners):
            name = f"{tp.__module__.rsplit('.', 1)[-1]}_{name}"  # another shape (or body model) of that name
        ref = {"$ref": _REF.format(model=name)}
        if name in self._owners:
            return ref
        schema: dict[str, Any] = {"type": "object"}
        self._owners[name], self._components[name] = tp, schema  # before the fields: a shape may refer to itself
        hints = typing.get_type_hints(tp, include_extras=True)
        schema["properties"] = {field: self.schema(_bare(hint)) for field, hint in hints.items()}
        schema["required"] = sorted(field for field, hint in hints.items() if _required(hint, tp.__total__))
        return ref


def _required(hint: Any, total: bool) -> bool:
    """From the annotation itself: Python 3.11 reads `NotRequired` in postponed annotations wrongly."""
    origin = get_origin(hint)
    return True if origin is typing.Required else False if origin is typing.NotRequired else total


def _bare(hint: Any) -> Any:
    while get_origin(hint) in (typing.Required, typing.NotRequired, typing.Annotated):
        hint = get_args(hint)[0]
    return hint
