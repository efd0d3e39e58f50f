"""The OpenAI protocol family, assembled: chat, completions, embeddings, models, responses, and
llama-server's tokenizer, rerank and LoRA adapter routes."""

from __future__ import annotations

from ..base import Adapter
from . import chat, completions, embeddings, lora, models, rerank, tokenizer
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
        *rerank.ROUTES,
        *lora.ROUTES,
    ),
    render_error=render_error,
    tag_error=tag_error,
)
