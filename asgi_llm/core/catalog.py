"""What the server knows about its models, without touching them (answers instantly)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["ModelCard", "ModelState"]

ModelState = Literal["unloaded", "loading", "ready", "failed"]


@dataclass(frozen=True)
class ModelCard:
    id: str
    created: int
    owned_by: str
    aliases: tuple[str, ...]
    state: ModelState
    context_length: int
    embeddings: bool
    expires_at: float | None = None  # when an idle model will unload (Unix time), if it will
    size: int = 0  # bytes of the model file
