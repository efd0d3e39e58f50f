"""Anthropic Messages: `POST /messages`, `POST /messages/count_tokens`, `GET /models` (placeholder)."""

from __future__ import annotations

from asgi_llm.core import LLMError

from .base import Reply, Route

__all__ = ["ROUTES", "render_error"]


def render_error(error: LLMError) -> Reply:
    return error.status, {"type": "error", "error": {"type": "api_error", "message": error.message}}


ROUTES: tuple[Route, ...] = ()
