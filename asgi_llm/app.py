"""`LLMApp`: the composition root — routes from adapters, the endpoint glue, the pool, lifespan."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from typing import Any

from .adapters.base import Adapter, Route, StateStore
from .adapters.openai import OPENAI
from .asgi import Receive, Scope, Send, send_json
from .config import Settings
from .core import LLMError, MethodNotAllowed, RouteNotFound
from .endpoint import Endpoint
from .pool import ModelPool
from .routing import Router, route_path
from .state import MemoryStore, SQLiteStore

__all__ = ["LLMApp"]

log = logging.getLogger("asgi_llm")

_HEALTH = "health"


def _store_from(settings: Settings) -> StateStore:
    items, age = settings.state_max_items, settings.state_max_age_seconds
    if settings.state_store == "sqlite":
        return SQLiteStore(settings.state_path, max_items=items, max_age_seconds=age)
    return MemoryStore(max_items=items, max_age_seconds=age)


class LLMApp:
    """A mountable ASGI app serving the given protocols from a model pool.

    Models load in `lifespan` (compose `llm.lifespan` into the host's own); hosts that
    don't forward lifespan to mounts get the pool started on the first request.
    """

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        pool: ModelPool | None = None,
        adapters: Sequence[Adapter] = (OPENAI,),
        health_path: str | None = "/health",
        store: StateStore | None = None,
    ) -> None:
        if pool is not None and settings is not None:
            raise ValueError("pass settings or a shared pool, not both")
        self.pool = pool or ModelPool(settings)
        self.settings = self.pool.settings
        self._adapters = tuple(adapters)
        table: list[tuple[str, tuple[str, ...], tuple[Route | str, Adapter], str | None]] = [
            (route.path, route.methods, (route, adapter), getattr(route, "requires_header", None))
            for adapter in self._adapters
            for route in adapter.routes
        ]
        table.sort(key=lambda row: row[3] is None)  # header-specific routes first
        if health_path:
            table.append((health_path, ("GET",), (_HEALTH, self._adapters[0]), None))
        self._router = Router(table)
        self.store = store or _store_from(self.settings)
        self._endpoint = Endpoint(self.pool, self.store, self.settings.max_body_bytes)
        self._lifespan_entered = False
        self._lazy_lock = asyncio.Lock()

    def sibling(self, *adapters: Adapter, health_path: str | None = "/health") -> LLMApp:
        """Another app on the same pool and store, speaking other protocols — e.g. Ollama's
        routes mounted at the host's root beside OpenAI's at `/v1`."""
        return LLMApp(pool=self.pool, adapters=adapters, health_path=health_path, store=self.store)

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Any = None) -> AsyncIterator[None]:
        """Start the pool (models load in the background) and stop it on exit."""
        self._lifespan_entered = True
        await self.pool.start()
        try:
            yield
        finally:
            await self.pool.stop()
            self._lifespan_entered = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._serve_lifespan(receive, send)
        elif scope["type"] == "http":
            await self._serve_http(scope, receive, send)

    async def _serve_http(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self.pool.started:
            await self._lazy_start()
        headers = {bytes(k).decode("latin-1").lower() for k, _ in scope.get("headers", ())}
        match = self._router.match(route_path(scope), scope["method"], headers)
        adapter = next((a for a in self._adapters if a.signature_header in headers), self._adapters[0])
        if match is None or match.target is None:
            error: LLMError = (
                RouteNotFound(f"No route for {scope['method']} {route_path(scope)}.")
                if match is None
                else MethodNotAllowed(f"Use {', '.join(match.allowed)} here.")
            )
            await self._endpoint.send_error(adapter, error, send)
            return
        route, adapter = match.target
        if route == _HEALTH:
            status, body = self.pool.health()
            await send_json(send, status, body)
            return
        assert not isinstance(route, str)
        await self._endpoint(route, adapter, match.params, scope, receive, send)

    async def _lazy_start(self) -> None:
        async with self._lazy_lock:
            if not self.pool.started:
                log.warning("lifespan was not forwarded to asgi_llm; starting the model pool on the first request")
                await self.pool.start()

    async def _serve_lifespan(self, receive: Receive, send: Send) -> None:
        manager = self.lifespan()
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await manager.__aenter__()
                except Exception as exc:
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await manager.__aexit__(None, None, None)
                await send({"type": "lifespan.shutdown.complete"})
                return
