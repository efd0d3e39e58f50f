"""A scripted engine for fast tests of everything around the model (like httpx's MockTransport)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Sequence
from typing import Any

from ..config import ModelConfig
from ..core import (
    EmbeddingRequest,
    EmbeddingResult,
    EngineEvent,
    Finish,
    FinishReason,
    GenerationRequest,
    LLMError,
    PromptRead,
    TextDelta,
    Usage,
)
from ..core.engine import EngineHealth
from ..core.events import Embedding
from ..core.memory import MemoryEstimate
from .inference_thread import InferenceThread

__all__ = ["FakeEngine"]


class FakeEngine:
    """Replies with `pieces` for every choice; `loaded` gates `load()`; `error` is raised instead."""

    def __init__(
        self,
        config: ModelConfig,
        thread: InferenceThread | None = None,
        *,
        pieces: Sequence[str] = ("Hello", " there"),
        error: LLMError | None = None,
        loaded: asyncio.Event | None = None,
    ) -> None:
        self.config = config
        self.pieces = tuple(pieces)
        self.error = error
        self._loaded = loaded
        self.closed = False
        self.state = EngineHealth()
        """What `health` reports: set it to a stalled one to see how the rest reacts."""
        self.progress = 0.0  # how far `load` has got, as /health shows it: set it from a slow load
        self.waiting = 0  # requests queued, as metrics show them
        self.memory: MemoryEstimate | None = None  # what the model lists show it holds once loaded

    @property
    def supports_embeddings(self) -> bool:
        return self.config.embeddings

    @property
    def context_length(self) -> int:
        return self.config.n_ctx

    def health(self) -> EngineHealth:
        return self.state

    def describe(self) -> dict[str, Any]:
        return {}

    async def load(self) -> None:
        if self._loaded is not None:
            await self._loaded.wait()

    async def close(self) -> None:
        self.closed = True

    def generate(self, request: GenerationRequest) -> AsyncGenerator[EngineEvent, None]:
        return self._events(request)

    async def _events(self, request: GenerationRequest) -> AsyncGenerator[EngineEvent, None]:
        if self.error is not None:
            raise self.error
        limit = request.sampling.max_tokens or len(self.pieces)
        pieces = self.pieces[:limit]
        for index in range(request.n):
            if index == 0:
                yield PromptRead(tokens=3, index=index)  # as the local engine tells it, before any token
            for piece in pieces:
                yield TextDelta(piece, index=index)
            reason: FinishReason = "length" if limit < len(self.pieces) else "stop"
            yield Finish(reason, Usage(prompt_tokens=3 if index == 0 else 0, completion_tokens=len(pieces)), index=index)

    async def count_tokens(self, request: GenerationRequest) -> int:
        return 3

    async def embed(self, request: EmbeddingRequest) -> EmbeddingResult:
        return EmbeddingResult(tuple(Embedding((1.0, 0.0), tokens=1) for _ in request.inputs))
