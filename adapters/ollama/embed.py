"""Ollama embeddings: `POST /api/embed` (batched) and the legacy `POST /api/embeddings` (one prompt)."""

from __future__ import annotations

import time
from typing import Annotated, Any

from pydantic import Field

from asgi_llm.core import EmbeddingRequest, EmbeddingResult, InvalidRequest, Unsupported

from ..base import ContextNeed, EmbedRoute, Meta, Parsed, refuse_unrecognized, validate
from .common import (
    Clock,
    Started,
    Wire,
    WireOptions,
    context_need,
    durations_since,
    keep_alive_seconds,
    model_name,
)

__all__ = ["ROUTES", "embedding_options", "parse_embed", "parse_embeddings", "render_embed", "render_embeddings"]


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


def embedding_options(options: WireOptions | None) -> ContextNeed | None:
    """Of the runtime `options`, embeddings read `num_ctx` alone (the context the model must
    have); any other is refused, naming it, for it would change nothing."""
    given = options.model_dump(exclude_none=True) if options is not None else {}
    given.pop("num_ctx", None)
    if given:
        param = f"options.{next(iter(given))}"
        raise Unsupported(f"'{param}': embeddings take no sampling options.", param=param)
    return context_need(options)


def parse_embed(body: Any, clock: Clock = time.perf_counter_ns) -> Parsed[EmbeddingRequest, Started]:
    """An empty `input` is Ollama's way to load the model: it answers with no embeddings."""
    started = Started.now(clock)
    wire = validate(EmbedBody, body)
    refuse_unrecognized(wire)
    need = embedding_options(wire.options)
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
    return Parsed(request, started, keep_alive=keep_alive_seconds(wire.keep_alive), needs_context=need)


def render_embed(
    parsed: Parsed[EmbeddingRequest, Started], meta: Meta, result: EmbeddingResult, now_ns: Clock = time.perf_counter_ns
) -> dict[str, Any]:
    durations = durations_since(parsed.options, now_ns())
    return {
        "model": meta.model,
        "embeddings": [list(e.vector) for e in result.embeddings],
        "total_duration": durations["total_duration"],
        "load_duration": durations["load_duration"],
        "prompt_eval_count": result.prompt_tokens,
    }


def parse_embeddings(body: Any, clock: Clock = time.perf_counter_ns) -> Parsed[EmbeddingRequest, Started]:
    """The legacy form; an empty prompt (loading the model) gets an empty embedding back. Its
    `options` follow `/api/embed`'s rules."""
    started = Started.now(clock)
    wire = validate(EmbeddingsBody, body)
    refuse_unrecognized(wire)
    need = embedding_options(wire.options)
    request = EmbeddingRequest(model=model_name(wire.model), inputs=(wire.prompt,) if wire.prompt else ())
    return Parsed(request, started, keep_alive=keep_alive_seconds(wire.keep_alive), needs_context=need)


def render_embeddings(parsed: Parsed[EmbeddingRequest, Started], meta: Meta, result: EmbeddingResult) -> dict[str, Any]:
    return {"embedding": list(result.embeddings[0].vector) if result.embeddings else []}


ROUTES = (
    EmbedRoute(path="/api/embed", parse=parse_embed, render=render_embed, body=EmbedBody),
    EmbedRoute(path="/api/embeddings", parse=parse_embeddings, render=render_embeddings, body=EmbeddingsBody),
)
