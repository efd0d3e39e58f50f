"""The Anthropic protocol family, assembled: messages and token counting, plus model listing.

`GET /models` answers in Anthropic's shape only for requests carrying `anthropic-version`
(every Anthropic SDK sends it); OpenAI's listing answers the rest.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from asgi_llm.core import ModelCard, ModelNotFound

from . import anthropic_messages
from .anthropic_messages import render_error
from .base import Adapter, InfoContext, InfoRoute, Reply

__all__ = ["ANTHROPIC", "MODEL_ROUTES", "get_model", "list_models"]


def _model_info(card: ModelCard) -> dict[str, Any]:
    created = datetime.fromtimestamp(card.created, tz=UTC).isoformat().replace("+00:00", "Z")
    return {
        "type": "model",
        "id": card.id,
        "display_name": card.id,
        "created_at": created,
        "lifecycle": "active",
        "max_input_tokens": card.context_length,
    }


def list_models(ctx: InfoContext) -> Reply:
    data = [_model_info(card) for card in ctx.catalog]
    first, last = (data[0]["id"], data[-1]["id"]) if data else (None, None)
    return 200, {"data": data, "has_more": False, "first_id": first, "last_id": last}


def get_model(ctx: InfoContext) -> Reply:
    name = ctx.params["model"]
    for card in ctx.catalog:
        if name == card.id or name in card.aliases:
            return 200, _model_info(card)
    raise ModelNotFound(name)


MODEL_ROUTES = (
    InfoRoute(path="/models", handle=list_models, requires_header="anthropic-version"),
    InfoRoute(path="/models/{model:path}", handle=get_model, requires_header="anthropic-version"),
)

ANTHROPIC = Adapter(
    name="anthropic",
    routes=(*anthropic_messages.ROUTES, *MODEL_ROUTES),
    render_error=render_error,
    signature_header="anthropic-version",
)
