"""The Ollama API (`/api/*`), served at the host's root (placeholder)."""

from __future__ import annotations

from asgi_llm.core import LLMError

from .base import Adapter, Reply, Route

__all__ = ["OLLAMA", "render_error"]


def render_error(error: LLMError) -> Reply:
    return error.status, {"error": error.message}


ROUTES: tuple[Route, ...] = ()

OLLAMA = Adapter(name="ollama", routes=ROUTES, render_error=render_error)
