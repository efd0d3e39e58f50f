"""The OpenAI protocol family, assembled: chat, completions, embeddings, models, responses, and
llama-server's tokenizer routes."""

from __future__ import annotations

from ..base import Adapter
from . import chat, completions, embeddings, models, tokenizer
from .common import render_error, tag_error
from .responses import routes as responses

__all__ = ["OPENAI"]

OPENAI = Adapter(
    name="openai",
    routes=(
        chat.ROUTE,
        completions.ROUTE,
        embeddings.ROUTE,
        *models.ROUTES,
        *responses.ROUTES,
        *tokenizer.ROUTES,
    ),
    render_error=render_error,
    tag_error=tag_error,
)
