"""OpenAI model listing: `GET /models`, `GET /models/{model}`; answered from the catalog alone."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from asgi_llm.core import ModelCard, ModelNotFound

from ..base import InfoRoute, Reply

__all__ = ["ROUTES", "get_model", "list_models"]


def _card(card: ModelCard) -> dict[str, Any]:
    """OpenAI's fields, `rerank`: how `/rerank` ranks with the model (`rank`, `judge`, or null),
    and where the model lists them, `embedding_dimensions`: the sizes embeddings' `dimensions` takes;
    `vision: true` where its messages may carry images."""
    fields = {
        "id": card.id,
        "object": "model",
        "created": card.created,
        "owned_by": card.owned_by,
        "rerank": card.rerank,
    }
    fields |= {"embedding_dimensions": list(card.embedding_dimensions)} if card.embedding_dimensions else {}
    return fields | ({"vision": True} if card.vision else {})


def list_models(catalog: Sequence[ModelCard], params: Mapping[str, str]) -> Reply:
    return 200, {"object": "list", "data": [_card(c) for c in catalog]}


def get_model(catalog: Sequence[ModelCard], params: Mapping[str, str]) -> Reply:
    name = params["model"]
    for card in catalog:
        if name == card.id or name in card.aliases:
            return 200, _card(card)
    raise ModelNotFound(name)


ROUTES = (
    InfoRoute(path="/models", handle=lambda ctx: list_models(ctx.catalog, ctx.params)),
    InfoRoute(path="/models/{model:path}", handle=lambda ctx: get_model(ctx.catalog, ctx.params)),
)
