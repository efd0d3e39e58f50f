"""Smaller embeddings from a Matryoshka model: a request's `dimensions`, where the model lists it.

A Matryoshka model (nomic-embed v1.5, mxbai-embed, Qwen3-Embedding, OpenAI's text-embedding-3)
is trained so that the first values of each vector are an embedding of their own: the first
256 of 768, scaled back to unit length, rank nearly as well. Which sizes a model was trained
for is its operator's to say (`embedding_dimensions`); any other is refused, never guessed at.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from .errors import InvalidRequest, Unsupported
from .events import Embedding, EmbeddingResult
from .requests import EmbeddingRequest

__all__ = ["embedding_size", "shortened"]


def embedding_size(request: EmbeddingRequest, sizes: Sequence[int], model: str) -> int | None:
    """The size the request's `dimensions` asks for: None where it asks for none, else one of
    the `sizes` the model lists; any other is a 400 naming `dimensions`."""
    if request.dimensions is None or request.dimensions in sizes:
        return request.dimensions
    if not sizes:
        message = f"The model '{model}' gives embeddings of one size; it lists no 'dimensions' to shorten them to."
        raise Unsupported(message, param="dimensions")
    listed = ", ".join(str(size) for size in sizes)
    raise InvalidRequest(f"'dimensions' must be one of {listed} for the model '{model}'.", param="dimensions")


def shortened(result: EmbeddingResult, size: int, model: str) -> EmbeddingResult:
    """Each vector's first `size` values, scaled back to unit length (L2)."""
    longest = max((len(e.vector) for e in result.embeddings), default=size)
    if size > longest:
        message = f"'dimensions' is {size}, but the model '{model}' gives embeddings of {longest} values."
        raise InvalidRequest(message, param="dimensions")
    return EmbeddingResult(tuple(Embedding(_unit(e.vector[:size]), e.tokens) for e in result.embeddings))


def _unit(vector: tuple[float, ...]) -> tuple[float, ...]:
    norm = math.sqrt(math.fsum(x * x for x in vector)) or 1.0
    return tuple(x / norm for x in vector)
