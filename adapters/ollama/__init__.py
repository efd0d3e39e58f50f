"""The Ollama API (`/api/*` and `/`), assembled; mount it at the host's root, where Ollama clients look."""

from __future__ import annotations

from ..base import Adapter
from . import chat, embed, generate, models
from .common import render_error, tag_error

__all__ = ["OLLAMA", "render_error"]

OLLAMA = Adapter(
    name="ollama",
    routes=(chat.ROUTE, generate.ROUTE, *embed.ROUTES, *models.ROUTES),
    render_error=render_error,
    tag_error=tag_error,
)
