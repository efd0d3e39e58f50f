"""A project's ASGI entry point: the LLM API at a prefix, Django everywhere else.

    # mysite/asgi.py
    import os

    from asgi_llm.contrib.django import get_asgi_application

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mysite.settings")
    application = get_asgi_application()

Django rejects the `lifespan` scope (and uvicorn then carries on without one), so the
dispatcher answers it: the model pool starts at server startup and stops at shutdown.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import cast

from ...app import LLMApp
from ...http.asgi import ASGIApp, Receive, Scope, Send
from .._protocols import DEFAULT_ADAPTERS, OLLAMA, ollama_root_paths
from .conf import read_options
from .keys import database_key

__all__ = ["LLMDispatcher", "get_asgi_application"]


def get_asgi_application(llm: LLMApp | None = None) -> LLMDispatcher:
    """Set Django up and return its ASGI handler with the LLM API beside it.

    `settings.ASGI_LLM` is read at server startup (or on the first request). Pass `llm`
    to serve your own `LLMApp` (other protocols, middleware); `PREFIX` and
    `OLLAMA_AT_ROOT` still come from the setting.
    """
    from django.core.asgi import get_asgi_application as django_asgi_application

    return LLMDispatcher(cast(ASGIApp, django_asgi_application()), llm)


@dataclass(frozen=True)
class _Mounts:
    prefix: str
    api: LLMApp
    ollama: LLMApp | None
    ollama_paths: frozenset[str]

    def target(self, scope: Scope) -> tuple[ASGIApp, Scope] | None:
        """The LLM app for this request and the scope it should see; None for Django's own."""
        if scope["type"] != "http":
            return None
        root: str = scope.get("root_path", "")
        path = _below(scope.get("path", "/"), root)
        if path is None:
            return None
        if path == self.prefix or path.startswith(self.prefix + "/"):
            return self.api, {**scope, "root_path": root + self.prefix}
        if self.ollama is not None and "/" + path.strip("/") in self.ollama_paths:
            return self.ollama, scope
        return None


def _below(path: str, root: str) -> str | None:
    """`path` relative to the host's `root_path` (servers pass the full path, as ASGI asks)."""
    if not root:
        return path
    if path == root or path.startswith(root.rstrip("/") + "/"):
        return path[len(root.rstrip("/")) :] or "/"
    return None


class LLMDispatcher:
    """Sends the prefix (and Ollama's `/api/*`, if asked) to asgi_llm, the rest to Django."""

    def __init__(self, django: ASGIApp, llm: LLMApp | None = None) -> None:
        self.django = django
        self._llm = llm
        self._mounts: _Mounts | None = None

    @property
    def llm(self) -> LLMApp:
        """The LLM app (built from `settings.ASGI_LLM` on first use)."""
        return self._mounted().api

    def _mounted(self) -> _Mounts:
        if self._mounts is None:
            options = read_options()
            verify = database_key if options.database_keys else None
            api = self._llm or LLMApp(options.settings, adapters=DEFAULT_ADAPTERS, verify=verify)
            ollama = api.sibling(OLLAMA, health_path=None) if options.ollama_at_root else None
            self._mounts = _Mounts(options.prefix, api, ollama, frozenset(ollama_root_paths()))
        return self._mounts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        routed = self._mounted().target(scope)
        if routed is None:
            await self.django(scope, receive, send)
        else:
            app, child = routed
            await app(child, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        async with contextlib.AsyncExitStack() as stack:
            await receive()  # lifespan.startup
            try:
                await stack.enter_async_context(self._mounted().api.lifespan())
            except Exception as exc:  # noqa: BLE001 - reported to the server, which then exits
                await send({"type": "lifespan.startup.failed", "message": f"asgi_llm could not start: {exc}"})
                return
            await send({"type": "lifespan.startup.complete"})
            await receive()  # lifespan.shutdown
        await send({"type": "lifespan.shutdown.complete"})
