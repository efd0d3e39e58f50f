"""Embeddings, from a second context on the same loaded model, opened for pooled outputs."""

from __future__ import annotations

from typing import Any

import llama_cpp
import numpy as np

from ...config import ModelConfig
from ...core.errors import ContextOverflow, InvalidRequest
from ...core.events import Embedding, EmbeddingResult
from ...core.requests import EmbeddingRequest
from .jobs import BatchToken
from .native import Decoder, Model, new_single_context
from .prompt_bound import SLACK, TooLong, bounded_tokens

__all__ = ["Embedder"]

_POOLING = {"mean": 1, "cls": 2, "last": 3}


class Embedder:
    """Shares the generation context's weights (no second copy of the model in memory)."""

    def __init__(self, model: Model, config: ModelConfig, context_length: int) -> None:
        self._model = model
        self._size = min(context_length, 2048)  # LlamaCppEngine._embed_size
        pooling = _POOLING[config.pooling]
        context = new_single_context(model, config, size=self._size, batch=self._size, pooling=pooling)
        self._decoder = Decoder(context)
        self._n_embd = int(model.native.n_embd())

    def close(self) -> None:
        self._decoder.close()

    def embed(self, request: EmbeddingRequest, checked_ids: Any) -> EmbeddingResult:
        vectors = []
        for i, item in enumerate(request.inputs):
            if isinstance(item, str):
                tokens = self._tokens(item, i, request.truncate)
            else:
                tokens = checked_ids(item, f"input[{i}]")
            if not tokens:
                raise InvalidRequest("An input to embed is empty.", param=f"input[{i}]")
            if request.truncate:
                tokens = tokens[: self._size]
            if len(tokens) > self._size:
                raise self._overflow(i, len(tokens))
            self._decoder.clear()
            self._decoder.decode([BatchToken(token, position, 0, True) for position, token in enumerate(tokens)])
            pooled = llama_cpp.llama_get_embeddings_seq(self._decoder.context.ctx, 0)
            raw = np.array(pooled[: self._n_embd], dtype=np.float64)
            norm = float(np.linalg.norm(raw)) or 1.0
            vectors.append(Embedding(vector=tuple((raw / norm).tolist()), tokens=len(tokens)))
        self._decoder.clear()
        return EmbeddingResult(tuple(vectors))

    def _tokens(self, text: str, index: int, truncate: bool) -> list[int]:
        """An input's tokens, refused once it surely has more than fit (see `prompt_bound`); when
        truncating, only a prefix long enough to give the tokens kept is read."""
        longest = self._model.longest_piece
        if truncate:  # a prefix that has at least the tokens kept, if it is cut at all
            return self._tokenize(text[: (self._size + SLACK) * longest] if longest is not None else text, True)
        tokens = bounded_tokens(text, self._tokenize, limit=self._size, longest=longest, add_bos=True)
        if isinstance(tokens, TooLong):
            raise self._overflow(index, tokens.tokens if tokens.exact else f"at least {tokens.tokens}")
        return tokens

    def _tokenize(self, text: str, add_bos: bool) -> list[int]:
        return self._model.tokenize(text, add_bos=add_bos, special=False)

    def _overflow(self, index: int, tokens: int | str) -> ContextOverflow:
        message = f"Input {index} is {tokens} tokens; this model embeds at most {self._size}."
        return ContextOverflow(message, param="input")
