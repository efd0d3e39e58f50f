"""Reranking and LoRA adapters, as a client asks for them once the wire format is gone."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

__all__ = ["AdapterScale", "LoraAdapters", "RerankKind", "RerankRequest", "RerankResult"]

RerankKind = Literal["rank", "judge"]
"""How a model ranks documents: `rank`, a reranker GGUF's own classifier (llama.cpp's rank
pooling); `judge`, a chat model's probability of answering "yes" to a fixed judging prompt."""


@dataclass(frozen=True)
class RerankRequest:
    """Documents to score against `query`; `top_n` keeps the best (None: all of them)."""

    model: str
    query: str
    documents: tuple[str, ...]
    top_n: int | None = None
    user: str | None = None


@dataclass(frozen=True)
class RerankResult:
    """One relevance score per document, in the request's order (0 to 1, higher is more relevant)."""

    scores: tuple[float, ...]
    prompt_tokens: int


@dataclass(frozen=True)
class AdapterScale:
    """One LoRA adapter of a model, by its configured `id`, and how strongly it applies (0: not at all)."""

    id: str
    scale: float


class LoraAdapters(Protocol):
    """A model's LoRA adapters and the scales a request that names none gets (llama-server's
    `/lora-adapters`). Errors are raised as `LLMError`s."""

    def listing(self) -> tuple[AdapterScale, ...]:
        """Every adapter with its default scale, in the configured order."""
        ...

    def set_defaults(self, scales: Sequence[AdapterScale]) -> None:
        """New default scales for those named (the rest keep theirs); an unknown id is an
        `InvalidRequest` naming `lora[i].id`, and nothing changes."""
        ...
