"""Embeddings, from a second context of the same GGUF file opened for pooled outputs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import llama_cpp
import numpy as np

from ...config import ModelConfig
from ...core.errors import ContextOverflow, InvalidRequest
from ...core.events import Embedding, EmbeddingResult
from ...core.requests import EmbeddingRequest
from .native import SPLIT_MODES

__all__ = ["Embedder"]

_POOLING = {"mean": 1, "cls": 2, "last": 3}


class Embedder:
    def __init__(self, config: ModelConfig, context_length: int) -> None:
        size = min(context_length, 2048)
        self._llm: Any = llama_cpp.Llama(
            model_path=config.resolved_path(),
            embedding=True,
            n_ctx=size,
            n_batch=size,
            n_ubatch=size,
            pooling_type=_POOLING[config.pooling],
            n_threads=config.threads,
            n_threads_batch=config.n_threads_batch or config.threads,
            n_gpu_layers=config.n_gpu_layers,
            main_gpu=config.main_gpu,
            split_mode=SPLIT_MODES[config.split_mode],
            tensor_split=list(config.tensor_split) if config.tensor_split else None,
            offload_kqv=config.offload_kqv,
            use_mmap=config.use_mmap,
            use_mlock=config.use_mlock,
            verbose=False,
        )

    def close(self) -> None:
        self._llm.close()

    def embed(self, request: EmbeddingRequest, checked_ids: Any) -> EmbeddingResult:
        llm = self._llm
        n_embd = llm.n_embd()
        vectors = []
        for i, item in enumerate(request.inputs):
            tokens: Sequence[int]
            if isinstance(item, str):
                add_bos = bool(llm._model.add_bos_token())
                tokens = list(llm.tokenize(item.encode("utf-8"), add_bos=add_bos, special=False))
            else:
                tokens = checked_ids(item, f"input[{i}]")
            if not tokens:
                raise InvalidRequest("An input to embed is empty.", param=f"input[{i}]")
            if request.truncate:
                tokens = tokens[: llm.n_batch]
            if len(tokens) > llm.n_batch:
                raise ContextOverflow(
                    f"Input {i} is {len(tokens)} tokens; this model embeds at most {llm.n_batch}.", param="input"
                )
            llm._batch.reset()
            llm._batch.add_sequence(tokens, 0, True)
            llm._ctx.kv_cache_clear()
            llm._ctx.decode(llm._batch)
            raw = np.array(llama_cpp.llama_get_embeddings_seq(llm._ctx.ctx, 0)[:n_embd], dtype=np.float64)
            norm = float(np.linalg.norm(raw)) or 1.0
            vectors.append(Embedding(vector=tuple((raw / norm).tolist()), tokens=len(tokens)))
        llm._ctx.kv_cache_clear()
        return EmbeddingResult(tuple(vectors))
