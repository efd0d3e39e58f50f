"""Embeddings, from a second context on the same loaded model, opened for pooled outputs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import llama_cpp
import numpy as np

from ...config import ModelConfig
from ...core.errors import ContextOverflow, InvalidRequest
from ...core.events import Embedding, EmbeddingResult
from ...core.requests import EmbeddingRequest
from ..batching import BatchToken
from .native import Decoder, Model, new_single_context

__all__ = ["Embedder"]

_POOLING = {"mean": 1, "cls": 2, "last": 3}


class Embedder:
    """Shares the generation context's weights (no second copy of the model in memory)."""

    def __init__(self, model: Model, config: ModelConfig, context_length: int) -> None:
        self._model = model
        self._size = min(context_length, 2048)
        pooling = _POOLING[config.pooling]
        context = new_single_context(model, config, size=self._size, batch=self._size, pooling=pooling)
        self._decoder = Decoder(context)
        self._n_embd = int(model.native.n_embd())

    def close(self) -> None:
        self._decoder.close()

    def embed(self, request: EmbeddingRequest, checked_ids: Any) -> EmbeddingResult:
        vectors = []
        for i, item in enumerate(request.inputs):
            tokens: Sequence[int]
            if isinstance(item, str):
                tokens = self._model.tokenize(item, add_bos=True, special=False)
            else:
                tokens = checked_ids(item, f"input[{i}]")
            if not tokens:
                raise InvalidRequest("An input to embed is empty.", param=f"input[{i}]")
            if request.truncate:
                tokens = tokens[: self._size]
            if len(tokens) > self._size:
                raise ContextOverflow(
                    f"Input {i} is {len(tokens)} tokens; this model embeds at most {self._size}.", param="input"
                )
            self._decoder.clear()
            self._decoder.decode([BatchToken(token, position, 0, True) for position, token in enumerate(tokens)])
            pooled = llama_cpp.llama_get_embeddings_seq(self._decoder.context.ctx, 0)
            raw = np.array(pooled[: self._n_embd], dtype=np.float64)
            norm = float(np.linalg.norm(raw)) or 1.0
            vectors.append(Embedding(vector=tuple((raw / norm).tolist()), tokens=len(tokens)))
        self._decoder.clear()
        return EmbeddingResult(tuple(vectors))
