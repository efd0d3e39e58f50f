"""Anthropic model listing: `GET /models`, `GET /models/{model}`; answered from the catalog alone.

Both routes answer only requests carrying `anthropic-version` (every Anthropic SDK sends it);
OpenAI's listing answers the rest.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from asgi_llm.core import ModelCard, ModelNotFound

from ..base import InfoContext, InfoRoute, Reply

__all__ = ["ROUTES", "get_model", "list_models"]


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


ROUTES = (
    InfoRoute(path="/models", handle=list_models, requires_header="anthropic-version"),
    InfoRoute(path="/models/{model:path}", handle=get_model, requires_header="anthropic-version"),
)
