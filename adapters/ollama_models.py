"""Ollama's model routes, answered from the catalog alone: tags, show, ps, version, and `/`.

The catalog does not know a model's architecture, family, parameter count or quantization
yet; those answer with Ollama's "unknown" values (empty strings).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from asgi_llm.core import InvalidRequest, ModelCard, ModelNotFound

from .base import InfoContext, InfoRoute, Reply, validate
from .ollama_common import Wire, model_name, rfc3339

__all__ = ["tags", "show", "ps", "version", "running", "VERSION", "ROUTES"]

VERSION = "0.6.3"
"""The Ollama server version we answer like; clients gate features on it."""

_NEVER = "9999-12-31T23:59:59Z"  # a model kept loaded until the server stops
_ARCHITECTURE = "unknown"  # not in the catalog yet


def _tagged(card: ModelCard) -> str:
    return card.id if ":" in card.id else f"{card.id}:latest"


def _details() -> dict[str, Any]:
    return {
        "parent_model": "",
        "format": "gguf",
        "family": "",
        "families": [],
        "parameter_size": "",
        "quantization_level": "",
    }


def _summary(card: ModelCard) -> dict[str, Any]:
    name = _tagged(card)
    return {
        "name": name,
        "model": name,
        "size": card.size,
        "digest": hashlib.sha256(card.id.encode()).hexdigest(),  # stands for the model, not its file
        "details": _details(),
    }


def tags(catalog: Sequence[ModelCard]) -> Reply:
    return 200, {"models": [{**_summary(c), "modified_at": rfc3339(c.created)} for c in catalog]}


def ps(catalog: Sequence[ModelCard]) -> Reply:
    loaded = [c for c in catalog if c.state == "ready"]
    return 200, {
        "models": [
            {
                **_summary(c),
                "expires_at": _NEVER if c.expires_at is None else rfc3339(c.expires_at),
                "size_vram": 0,
                "context_length": c.context_length,
            }
            for c in loaded
        ]
    }


class ShowBody(Wire):
    model: str | None = None
    name: str | None = None  # the older spelling
    verbose: bool = False


def show(catalog: Sequence[ModelCard], body: Any) -> Reply:
    wire = validate(ShowBody, body)
    name = wire.model or wire.name
    if not name:
        raise InvalidRequest("Missing required parameter: 'model'.", param="model")
    wanted = model_name(name)
    card = next((c for c in catalog if wanted == c.id or wanted in c.aliases), None)
    if card is None:
        raise ModelNotFound(name)
    return 200, {
        "modelfile": "",
        "parameters": "",
        "template": "",
        "details": _details(),
        "model_info": {
            "general.architecture": _ARCHITECTURE,
            "general.basename": card.id,
            f"{_ARCHITECTURE}.context_length": card.context_length,
        },
        "capabilities": ["completion", *(["embedding"] if card.embeddings else [])],
        "modified_at": rfc3339(card.created),
    }


def version() -> Reply:
    return 200, {"version": VERSION}


def running() -> Reply:
    """What `GET /` and `HEAD /` answer, so clients can probe for a server."""
    return 200, "Ollama is running"


def _show(ctx: InfoContext) -> Reply:
    return show(ctx.catalog, ctx.body)


ROUTES = (
    InfoRoute(path="/api/tags", handle=lambda ctx: tags(ctx.catalog)),
    InfoRoute(path="/api/show", handle=_show, methods=("POST",)),
    InfoRoute(path="/api/ps", handle=lambda ctx: ps(ctx.catalog)),
    InfoRoute(path="/api/version", handle=lambda ctx: version()),
    InfoRoute(path="/", handle=lambda ctx: running(), methods=("GET", "HEAD")),
)
