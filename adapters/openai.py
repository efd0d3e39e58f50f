"""The OpenAI protocol family, assembled: chat, completions, embeddings, models, responses."""

from __future__ import annotations

from . import openai_chat, openai_completions, openai_embeddings, openai_models, openai_responses
from .base import Adapter
from .openai_common import render_error

__all__ = ["OPENAI"]

OPENAI = Adapter(
    name="openai",
    routes=(
        openai_chat.ROUTE,
        openai_completions.ROUTE,
        openai_embeddings.ROUTE,
        *openai_models.ROUTES,
        *openai_responses.ROUTES,
    ),
    render_error=render_error,
)
