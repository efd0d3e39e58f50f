"""OpenAI Embeddings: `POST /embeddings` (the openai SDK asks for base64 by default); `dimensions`
shortens the vectors where the model lists the size (core/embedding_sizes.py)."""

from __future__ import annotations

import base64
import struct
from typing import Annotated, Any, Literal, cast

from pydantic import Field

from asgi_llm.core import EmbeddingRequest, EmbeddingResult, InvalidRequest

from ..base import EmbedRoute, Meta, Parsed, refuse_unrecognized
from .common import Wire, texts_or_tokens_problem, validated

__all__ = ["ROUTE", "parse", "render"]

Encoding = Literal["float", "base64"]
"""How the embedding vectors go out: the options of a parsed embeddings request."""

EmbeddingInput = str | list[str] | list[int] | list[list[int]]


class EmbeddingBody(Wire):
    model: str
    input: EmbeddingInput
    encoding_format: Encoding = "float"
    dimensions: Annotated[int, Field(ge=1)] | None = None
    user: str | None = None


def parse(body: Any) -> Parsed[EmbeddingRequest, Encoding]:
    wire = validated(EmbeddingBody, body, input=texts_or_tokens_problem)
    refuse_unrecognized(wire)
    raw = wire.input
    inputs: tuple[str | tuple[int, ...], ...]
    if isinstance(raw, str):
        inputs = (raw,)
    elif not raw:
        raise InvalidRequest("'input' must not be empty.", param="input")
    elif all(isinstance(x, int) for x in raw):
        inputs = (tuple(cast(list[int], raw)),)
    else:
        inputs = tuple(x if isinstance(x, str) else tuple(cast(list[int], x)) for x in raw)
    for i, item in enumerate(inputs):
        if isinstance(item, str) and not item:
            raise InvalidRequest("An input string is empty.", param=f"input[{i}]")
    request = EmbeddingRequest(model=wire.model, inputs=inputs, user=wire.user, dimensions=wire.dimensions)
    return Parsed(request, wire.encoding_format)


def _encode(vector: tuple[float, ...], encoding: Encoding) -> list[float] | str:
    if encoding == "base64":
        return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")
    return list(vector)


def render(parsed: Parsed[EmbeddingRequest, Encoding], meta: Meta, result: EmbeddingResult) -> dict[str, Any]:
    return {
        "object": "list",
        "data": [
            {"object": "embedding", "index": i, "embedding": _encode(e.vector, parsed.options)}
            for i, e in enumerate(result.embeddings)
        ],
        "model": meta.model,
        "usage": {"prompt_tokens": result.prompt_tokens, "total_tokens": result.prompt_tokens},
    }


ROUTE = EmbedRoute(path="/embeddings", parse=parse, render=render, body=EmbeddingBody)
