"""Ollama embeddings: `POST /api/embed` (batched) and the legacy `POST /api/embeddings` (one prompt)."""

from __future__ import annotations

import time
from typing import Annotated, Any

from pydantic import Field

from asgi_llm.core import EmbeddingRequest, EmbeddingResult, InvalidRequest, Unsupported

from ..base import EmbedRoute, Meta, Parsed, refuse_unrecognized, validate
from .common import Clock, Wire, WireOptions, context_need, estimated_durations, keep_alive_seconds, model_name

__all__ = ["ROUTES", "parse_embed", "parse_embeddings", "render_embed", "render_embeddings"]


class EmbedBody(Wire):
    model: Annotated[str, Field(min_length=1)]
    input: str | list[str] = []  # noqa: RUF012 (a pydantic field: each body gets its own copy)
    truncate: bool = True  # Ollama's default: cut inputs longer than the model embeds at once
    dimensions: Annotated[int, Field(ge=0)] | None = None  # 0: none, as Ollama reads its zero value
    options: WireOptions | None = None
    keep_alive: float | str | None = None


class EmbeddingsBody(Wire):
    model: Annotated[str, Field(min_length=1)]
    prompt: str = ""
    options: WireOptions | None = None
    keep_alive: float | str | None = None


def parse_embed(body: Any) -> Parsed[EmbeddingRequest, None]:
    """An empty `input` is Ollama's way to load the model: it answers with no embeddings."""
    wire = validate(EmbedBody, body)
    refuse_unrecognized(wire)
    given = wire.options.model_dump(exclude_none=True) if wire.options is not None else {}
    given.pop("num_ctx", None)
    if given:
        param = f"options.{next(iter(given))}"
        raise Unsupported(f"'{param}': embeddings take no sampling options.", param=param)
    if isinstance(wire.input, str):
        inputs: tuple[str, ...] = (wire.input,) if wire.input else ()
    else:
        inputs = tuple(wire.input)
        for i, text in enumerate(inputs):
            if not text:
                raise InvalidRequest("An input string is empty.", param=f"input[{i}]")
    dimensions = wire.dimensions or None
    request = EmbeddingRequest(
        model=model_name(wire.model), inputs=inputs, truncate=wire.truncate, dimensions=dimensions
    )
    need = context_need(wire.options)
    return Parsed(request, None, keep_alive=keep_alive_seconds(wire.keep_alive), needs_context=need)


def render_embed(
    parsed: Parsed[EmbeddingRequest, None], meta: Meta, result: EmbeddingResult, now_ns: Clock = time.time_ns
) -> dict[str, Any]:
    durations = estimated_durations(meta, now_ns)
    return {
        "model": meta.model,
        "embeddings": [list(e.vector) for e in result.embeddings],
        "total_duration": durations["total_duration"],
        "load_duration": durations["load_duration"],
        "prompt_eval_count": result.prompt_tokens,
    }


def parse_embeddings(body: Any) -> Parsed[EmbeddingRequest, None]:
    """The legacy form; an empty prompt (loading the model) gets an empty embedding back."""
    wire = validate(EmbeddingsBody, body)
    refuse_unrecognized(wire)
    request = EmbeddingRequest(model=model_name(wire.model), inputs=(wire.prompt,) if wire.prompt else ())
    return Parsed(request, None, keep_alive=keep_alive_seconds(wire.keep_alive))


def render_embeddings(parsed: Parsed[EmbeddingRequest, None], meta: Meta, result: EmbeddingResult) -> dict[str, Any]:
    return {"embedding": list(result.embeddings[0].vector) if result.embeddings else []}


ROUTES = (
    EmbedRoute(path="/api/embed", parse=parse_embed, render=render_embed, body=EmbedBody),
    EmbedRoute(path="/api/embeddings", parse=parse_embeddings, render=render_embeddings, body=EmbeddingsBody),
)
