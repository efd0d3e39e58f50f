"""`LLMApp`: the composition root — routes from adapters, the endpoint glue, the pool, lifespan.
The default middleware it wraps around them is `stack.py`'s."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from typing import Any

import anyio

from .adapters.base import Adapter, Route, StateStore, required_header
from .adapters.openai import OPENAI
from .client import Client
from .config import Settings
from .core import MethodNotAllowed, RouteNotFound
from .http.asgi import ASGIApp, Receive, Scope, Send, send_json
from .http.context import RequestContext, attach, request_context, request_info, send_error, with_request_id_header
from .http.linger import serve_lingering
from .http.routing import Match, Router, route_path
from .logs import serving_request, tag_own_loggers
from .middleware import AuthMiddleware, KeyInfo, MetricsMiddleware, RequestInfo, Verifier
from .middleware.admin import ADMIN_PATHS, AdminMiddleware
from .openapi import AppRoute, openapi_document, served_at
from .pool import ModelPool
from .serving.endpoint import Endpoint
from .stack import Layer, default_middleware, key_identity
from .storage.state import MemoryStore, SQLiteStore
from .web import PAGE_PATHS, WebPage

__all__ = ["LLMApp", "Layer", "default_middleware"]

log = logging.getLogger("asgi_llm")

_HEALTH = "health"
_OPENAPI = "openapi"
_PAGE = "page"

Routed = tuple[Match[tuple[Route | str, Adapter]] | None, Adapter]

_MODEL_BODY = {
    "type": "object",
    "properties": {"model": {"type": "string"}},
    "required": ["model"],
    "additionalProperties": False,
}
_PIN_BODY = {
    "type": "object",
    "properties": {"model": {"type": "string"}, "pinned": {"type": "boolean"}},
    "required": ["model"],
    "additionalProperties": False,
}
_ADMIN_ROUTES = tuple(
    AppRoute(path, name, f"{summary} (operator keys only).", operator=True, method=method, body=body)
    for path, name, summary, method, body in (
        (ADMIN_PATHS[0], "admin_load", "Load a model", "POST", _MODEL_BODY),
        (ADMIN_PATHS[1], "admin_unload", "Unload a model", "POST", _MODEL_BODY),
        (ADMIN_PATHS[2], "admin_pin", "Pin or unpin a model", "POST", _PIN_BODY),
        (ADMIN_PATHS[3], "admin_models", "Each model's residency", "GET", None),
    )
)
_IN_PROCESS = "in_process"
"""The protocol name usage records and metrics give requests from `LLMApp.client`."""
_IN_PROCESS_ROUTES: Router[tuple[Route | str, Adapter]] = Router(
    [(route.path, route.methods, (route, OPENAI), None) for route in OPENAI.routes]
)


def _allowed(methods: tuple[str, ...]) -> list[str]:
    """A path's methods for a 405's `Allow` header (RFC 9110): each once, HEAD wherever GET is
    (the router serves HEAD with GET)."""
    allowed = list(dict.fromkeys(methods))
    return allowed + ["HEAD"] if "GET" in allowed and "HEAD" not in allowed else allowed


def _store_from(settings: Settings, pool: ModelPool) -> StateStore:
    items, age = settings.state_max_items, settings.state_max_age_seconds
    if settings.state_url is not None:  # PostgreSQL, shared by every process (its client imported only then)
        from .shared.wiring import shared_store

        timeout, fail_open = settings.backend_timeout, settings.fail_open
        return shared_store(
            pool.clients, settings.state_url, timeout=timeout, fail_open=fail_open, max_items=items, max_age=age
        )
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
        middleware: Sequence[Layer] | None = None,
        verify: Verifier | None = None,
        openapi_path: str | None = "/openapi.json",
        web_ui: bool | None = None,
    ) -> None:
        if pool is not None and settings is not None:
            raise ValueError("pass settings or a shared pool, not both")
        if middleware is not None and verify is not None:
            raise ValueError("pass verify to default_middleware() when giving your own middleware list")
        self.pool = pool or ModelPool(settings)
        self._adapters = tuple(adapters)
        table: list[tuple[str, tuple[str, ...], tuple[Route | str, Adapter], str | None]] = [
            (route.path, route.methods, (route, adapter), required_header(route))
            for adapter in self._adapters
            for route in adapter.routes
        ]
        table.sort(key=lambda row: row[3] is None)  # header-specific routes first
        if health_path:
            table.append((health_path, ("GET",), (_HEALTH, self._adapters[0]), None))
        if openapi_path:
            table.append((openapi_path, ("GET",), (_OPENAPI, self._adapters[0]), None))
        self._page = WebPage() if (self.pool.settings.web_ui if web_ui is None else web_ui) else None
        if self._page is not None:
            table.extend((path, ("GET",), (_PAGE, self._adapters[0]), None) for path in PAGE_PATHS)
        self._router = Router(table)
        self._health_path = health_path
        self._own_paths = {_HEALTH: health_path or "", _OPENAPI: openapi_path or "", _PAGE: PAGE_PATHS[0]}
        self._openapi: dict[str, Any] | None = None
        self.store = store or _store_from(self.settings, self.pool)
        self._endpoint = Endpoint(self.pool, self.store, self.settings.max_body_bytes)
        self._lifespan_entered = False
        self._lazy_lock = anyio.Lock(fast_acquire=True)
        self.middleware: tuple[Layer, ...] = (
            tuple(middleware) if middleware is not None else default_middleware(self.pool, verify=verify)
        )
        app: ASGIApp = self._serve_routed
        built: list[ASGIApp] = []
        for layer in reversed(self.middleware):  # the first layer is the outermost
            app = layer(app)
            built.append(app)
        self._app = app
        self._layers = tuple(reversed(built))  # as built, outermost first: the OpenAPI document reads them
        tag_own_loggers()  # our log lines name the request they belong to

    def sibling(self, *adapters: Adapter, health_path: str | None = "/health", web_ui: bool = False) -> LLMApp:
        """Another app on the same pool, store and middleware (so one key's limits and metrics
        span both), speaking other protocols — e.g. Ollama's routes at the host's root beside
        OpenAI's at `/v1`. It serves the web page only when asked (`web_ui=True`): one page
        per pool is enough, and a sibling in front of the host must not take the host's `/ui`."""
        twin = LLMApp(
            pool=self.pool,
            adapters=adapters,
            health_path=health_path,
            store=self.store,
            middleware=self.middleware,
            web_ui=web_ui,
        )
        twin._endpoint = Endpoint(self.pool, self.store, self.settings.max_body_bytes, runs=self._endpoint.runs)
        return twin

    def in_front_of(self, app: ASGIApp) -> ASGIApp:
        """An app that answers this app's own routes here and hands everything else — every other
        path, websockets, lifespan — to the host `app` untouched: no auth, no rewrite, no metrics.

        For protocols that must sit at the host's root (Ollama's `/api/*`): mounting there
        instead would swallow the host's own pages and 404s. The root page `/` stays the host's
        (Ollama answers it only with "Ollama is running"). The parameter is named `app` so
        the method is a middleware factory too (`host.add_middleware(ollama.in_front_of)`).
        """
        return _InFront(self, app)

    def client(self, key: str | None = None) -> Client:
        """This app's models for the host's own code, in-process: typed, streaming, no HTTP.

        Requests share the pool, queue, limits and usage records with HTTP clients. `key` is
        the name they are counted under; naming a configured key (`api_keys`) applies its
        limits and model allow-list too. The host's code is trusted: no secret is needed.
        """
        found = next((k for k in self.settings.all_api_keys() if k.name == key), None)
        identity = key_identity(found) if found is not None else (KeyInfo(name=key) if key else None)
        return Client(self._serve_in_process, identity)

    async def _serve_in_process(self, path: str, context: RequestContext, receive: Receive, send: Send) -> None:
        """An OpenAI route's request from `Client`, through the same layers as over HTTP."""
        scope: Scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "root_path": "",
            "query_string": b"",
            "headers": [],
            "client": None,
            "server": None,
            "state": {},
        }
        context.match = _IN_PROCESS_ROUTES.match(path, "POST")
        context.info = RequestInfo(_IN_PROCESS, path, path, OPENAI.render_error, self._resolve_model, OPENAI.tag_error)
        attach(scope, context)
        with serving_request(context.request_id):
            await self._app(scope, receive, send)

    def classify(self, scope: Scope) -> RequestInfo:
        """Which protocol and route a request is for, and its error envelope — what the
        middleware layers need; pass it as their `classify` to wrap this app from outside."""
        return self._describe(scope, self._match(scope))

    def _describe(self, scope: Scope, routed: Routed) -> RequestInfo:
        match, adapter = routed
        endpoint = "unmatched"
        if match is not None and match.target is not None:
            route = match.target[0]
            endpoint = self._own_paths[route] if isinstance(route, str) else route.path
        return RequestInfo(
            adapter.name,
            route_path(scope),
            endpoint,
            adapter.render_error,
            self._resolve_model,
            adapter.tag_error,
            adapter.request_id_header,
        )

    @property
    def settings(self) -> Settings:
        """The pool's settings: after startup, with discovered upstream models in place."""
        return self.pool.settings

    def _resolve_model(self, name: str) -> str | None:
        return self.pool.resolve(name) or self.pool.resolve(name.removesuffix(":latest"))

    def _match(self, scope: Scope) -> Routed:
        headers = {bytes(k).decode("latin-1").lower() for k, _ in scope.get("headers", ())}
        match = self._router.match(route_path(scope), scope.get("method", "GET"), headers)
        if match is not None and match.target is not None:
            return match, match.target[1]
        if match is not None and match.owner is not None:  # a 405 in the path's own protocol
            return match, match.owner[1]
        return match, next((a for a in self._adapters if a.signature_header in headers), self._adapters[0])

    async def reload(self, settings: Settings | None = None) -> None:
        """Serve new settings' models and keys without a restart (default: the same settings
        re-read: the keys file, `models_dir`); see `ModelPool.reload`."""
        await self.pool.reload(settings)

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Any = None) -> AsyncIterator[None]:
        """Start the pool (models load in the background) and stop it on exit; once the pool has
        stopped with its last user, close the Redis and PostgreSQL clients it shares with its
        siblings (`ModelPool.clients`)."""
        self._lifespan_entered = True
        await self.pool.start()
        await self._endpoint.runs.recover()  # background Responses a stopped server left unfinished
        try:
            yield
        finally:
            await self.pool.stop()
            if not self.pool.started:
                await self.pool.clients.aclose()
            self._lifespan_entered = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._serve_lifespan(receive, send)
        elif scope["type"] == "http":
            await self._serve_http(scope, receive, send, self._match(scope))

    async def _serve_http(self, scope: Scope, receive: Receive, send: Send, routed: Routed) -> None:
        """Through the layers, with the one route match they and the endpoint share; the page's
        own files need no key and are not recorded."""
        context = request_context(scope)
        context.match, context.info = routed[0], self._describe(scope, routed)
        send = with_request_id_header(scope, send)
        target = routed[0].target if routed[0] is not None else None
        if self._page is not None and target is not None and target[0] == _PAGE:
            await self._page(scope, receive, send)
            return
        with serving_request(context.request_id):  # a refusal sent before the body was read: read on
            await serve_lingering(self._app, scope, receive, send)

    async def _serve_routed(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self.pool.started:
            await self._lazy_start()
        match: Match[tuple[Route | str, Adapter]] | None = request_context(scope).match
        if match is None:
            error = RouteNotFound(f"No route for {scope['method']} {route_path(scope)}.")
            await send_error(scope, send, request_info(scope), error)
            return
        if match.target is None:
            allowed = _allowed(match.allowed)
            refusal = MethodNotAllowed(f"Use {', '.join(allowed)} here.")
            await send_error(scope, send, request_info(scope), refusal, [("allow", ", ".join(allowed))])
            return
        route = match.target[0]
        if route == _HEALTH:
            status, body = self.pool.health()
            await send_json(send, status, body)
            return
        if route == _OPENAPI:
            await send_json(send, 200, served_at(self.openapi(), scope.get("root_path", "")))
            return
        assert not isinstance(route, str)
        await self._endpoint(route, match.params, scope, receive, send)

    def openapi(self) -> dict[str, Any]:
        """The OpenAPI document of the routes this app serves (paths below its mount)."""
        if self._openapi is None:
            self._openapi = openapi_document(self._adapters, self._app_routes(), public=self._public_paths())
        return self._openapi

    def _app_routes(self) -> list[AppRoute]:
        routes: list[AppRoute] = []
        if self._health_path:
            routes.append(AppRoute(self._health_path, "health", "Whether the models are loaded; each one's state."))
        metrics = next((layer.path for layer in self._layers if isinstance(layer, MetricsMiddleware)), None)
        if metrics is not None:
            routes.append(AppRoute(metrics, "metrics", "Prometheus metrics (operator keys only).", "text/plain", True))
        if any(isinstance(layer, AdminMiddleware) for layer in self._layers):
            routes.extend(_ADMIN_ROUTES)
        if self._own_paths[_OPENAPI]:
            routes.append(AppRoute(self._own_paths[_OPENAPI], "openapi", "This document."))
        if self._page is not None:
            page, files = PAGE_PATHS
            routes.append(AppRoute(page, "web_ui", "The chat and operator page.", "text/html", keyless=True))
            routes.append(AppRoute(files, "web_ui_file", "The page's script and style.", "text/plain", keyless=True))
        return routes

    def _public_paths(self) -> frozenset[str] | None:
        """The paths that need no key, as the auth layer has them; None where no layer asks for keys."""
        return next((layer.public for layer in self._layers if isinstance(layer, AuthMiddleware)), None)

    async def _lazy_start(self) -> None:
        async with self._lazy_lock:
            if not self.pool.started:
                log.warning("lifespan was not forwarded to asgi_llm; starting the model pool on the first request")
                await self.pool.start()
                await self._endpoint.runs.recover()

    async def _serve_lifespan(self, receive: Receive, send: Send) -> None:
        manager = self.lifespan()
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await manager.__aenter__()
                except Exception as exc:  # noqa: BLE001 (the server is told, as lifespan.startup.failed)
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await manager.__aexit__(None, None, None)
                await send({"type": "lifespan.shutdown.complete"})
                return


class _InFront:
    def __init__(self, llm: LLMApp, host: ASGIApp) -> None:
        self._llm = llm
        self._host = host

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A path of ours (whatever the method) is served here, matched once; `/` stays the host's."""
        if scope["type"] == "http" and route_path(scope) != "/":
            routed = self._llm._match(scope)
            if routed[0] is not None:
                await self._llm._serve_http(scope, receive, send, routed)
                return
        await self._host(scope, receive, send)
