"""Model residency for operators: `POST /models/load`, `POST /models/unload` (llama-server's
router paths and bodies), `POST /models/pin` (`{"model": ..., "pinned": true}`) and
`GET /admin/models`, the richer list (state, progress, memory, pin, last use).

Operator keys only, as `/metrics`: loading and unloading change what every key is served.
Put it inside the auth layer; without auth configured, as `/metrics`, anyone may call it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from asgi_llm.core import Forbidden, InvalidRequest, LLMError
from asgi_llm.http.asgi import ASGIApp, Receive, Scope, Send, send_json
from asgi_llm.http.body import json_body
from asgi_llm.http.context import Classify, request_context, request_info, send_error

__all__ = ["ADMIN_PATHS", "AdminMiddleware", "Residency"]

ADMIN_PATHS = ("/models/load", "/models/unload", "/models/pin", "/admin/models")
_OPERATORS_ONLY = "Only an operator API key may load, unload or list the models' residency."


class Residency(Protocol):
    """What the admin routes drive (the model pool)."""

    async def load(self, name: str) -> None: ...
    async def unload(self, name: str) -> None: ...
    def pin(self, name: str, pinned: bool = True) -> None: ...
    def residency(self) -> Sequence[dict[str, Any]]: ...


class AdminMiddleware:
    """Answers the admin routes itself; every other request passes through untouched."""

    def __init__(
        self, app: ASGIApp, *, pool: Residency, max_body_bytes: int = 65536, classify: Classify | None = None
    ) -> None:
        self.app = app
        self._pool = pool
        self._limit = max_body_bytes
        self._classify = classify
        self._routes: dict[tuple[str, str], Callable[[Scope, Receive], Awaitable[Any]]] = {
            ("POST", "/models/load"): self._load,
            ("POST", "/models/unload"): self._unload,
            ("POST", "/models/pin"): self._pin,
            ("GET", "/admin/models"): self._list,
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        info = request_info(scope, self._classify)
        handler = self._routes.get((scope["method"], info.path))
        if handler is None:
            await self.app(scope, receive, send)
            return
        context = request_context(scope)
        context.info = info = dataclasses.replace(info, endpoint=info.path)
        try:
            if context.key is not None and not context.key.operator:
                raise Forbidden(_OPERATORS_ONLY)
            await send_json(send, 200, await handler(scope, receive))
        except LLMError as error:
            await send_error(scope, send, info, error)

    async def _model(self, scope: Scope, receive: Receive, extra: tuple[str, ...] = ()) -> tuple[str, dict[str, Any]]:
        body = await json_body(scope, receive, self._limit)
        for field in body:
            if field != "model" and field not in extra:
                raise InvalidRequest(f'Unknown field `{field}`: the body is {{"model": ...}}.', param=field)
        model = body.get("model")
        if not isinstance(model, str) or not model:
            raise InvalidRequest("`model` (a model id or alias) is required.", param="model")
        return model, body

    async def _pin(self, scope: Scope, receive: Receive) -> dict[str, Any]:
        model, body = await self._model(scope, receive, ("pinned",))
        pinned = body.get("pinned", True)
        if not isinstance(pinned, bool):
            raise InvalidRequest("`pinned` must be true or false.", param="pinned")
        self._pool.pin(model, pinned)
        return {"success": True}

    async def _load(self, scope: Scope, receive: Receive) -> dict[str, Any]:
        await self._pool.load((await self._model(scope, receive))[0])
        return {"success": True}

    async def _unload(self, scope: Scope, receive: Receive) -> dict[str, Any]:
        await self._pool.unload((await self._model(scope, receive))[0])
        return {"success": True}

    async def _list(self, scope: Scope, receive: Receive) -> dict[str, Any]:
        return {"object": "list", "data": list(self._pool.residency())}
