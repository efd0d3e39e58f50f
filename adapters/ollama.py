"""The Ollama API (`/api/*` and `/`), assembled; mount it at the host's root, where Ollama clients look."""

from __future__ import annotations

from . import ollama_chat, ollama_embed, ollama_generate, ollama_models
from .base import Adapter
from .ollama_common import render_error

__all__ = ["OLLAMA", "render_error"]

OLLAMA = Adapter(
    name="ollama",
    routes=(ollama_chat.ROUTE, ollama_generate.ROUTE, *ollama_embed.ROUTES, *ollama_models.ROUTES),
    render_error=render_error,
)
