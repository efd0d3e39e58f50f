"""Ollama completion: `POST /api/generate`; the model's chat template applies unless `"raw": true`."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from asgi_llm.core import ChatRequest, CompletionRequest, GenerationEvent, GenerationRequest, Message, Unsupported

from ..base import GenerateRoute, Meta, Parsed, refuse_unrecognized, validate
from ..images import checked_text
from .common import (
    Clock,
    GenerateFields,
    Started,
    context_need,
    keep_alive_seconds,
    model_name,
    sampling,
    think_reasoning,
    with_images,
)
from .stream import Delta, NdjsonStream, render_reply

__all__ = ["ROUTE", "GenerateStream", "fields", "parse", "render"]


class GenerateBody(GenerateFields):
    prompt: str | None = None
    suffix: str | None = None
    system: str | None = None
    template: str | None = None
    context: list[int] | None = None
    raw: bool = False
    images: list[str] | None = None


def parse(body: Any, clock: Clock = time.perf_counter_ns) -> Parsed[GenerationRequest, Started]:
    started = Started.now(clock)
    wire = validate(GenerateBody, body)
    _refuse_unsupported(wire)
    refuse_unrecognized(wire)
    params = sampling(wire.options, logprobs=wire.logprobs, top_logprobs=wire.top_logprobs, fmt=wire.format)
    model = model_name(wire.model)
    keep_alive = keep_alive_seconds(wire.keep_alive)
    request: GenerationRequest
    if not wire.prompt and not wire.images:  # Ollama's "load the model" call (with `keep_alive: 0`, "unload" it)
        request = ChatRequest(model=model, messages=(), sampling=params)
        return Parsed(request, started, stream=wire.stream, keep_alive=keep_alive, load_only=True)
    reasoning = think_reasoning(wire.think)
    if wire.raw:  # the prompt is already templated: what only a template places is refused
        if wire.system:  # Ollama drops it without a word; here it is refused, never ignored
            raise Unsupported("'system' needs the model's template; a raw prompt has none.", param="system")
        if reasoning is not None and reasoning.enabled:  # false asks for nothing a template would place
            raise Unsupported("'think' needs the model's template; a raw prompt has none.", param="think")
        if wire.images:
            raise Unsupported("'images' need the model's template; a raw prompt has none.", param="images")
        request = CompletionRequest(model=model, prompts=(wire.prompt or "",), sampling=params)
    else:
        system = (Message(role="system", content=checked_text(wire.system, "system")),) if wire.system else ()
        prompt, images = with_images(checked_text(wire.prompt or "", "prompt"), wire.images, "")
        turn = (*system, Message(role="user", content=prompt, images=images))
        request = ChatRequest(model=model, messages=turn, sampling=params, reasoning=reasoning)
    return Parsed(request, started, stream=wire.stream, keep_alive=keep_alive, needs_context=context_need(wire.options))


def _refuse_unsupported(wire: GenerateBody) -> None:
    """Never ignore what a client relies on: say it is unsupported, naming the param."""
    if wire.suffix:
        raise Unsupported("'suffix' (insertion) is not supported.", param="suffix")
    if wire.template:
        raise Unsupported("A custom 'template' is not supported; use 'raw' with a templated prompt.", param="template")
    if wire.context:
        raise Unsupported(
            "'context' (deprecated) is not supported; send the conversation to /api/chat.", param="context"
        )


def fields(delta: Delta) -> dict[str, Any]:
    body: dict[str, Any] = {"response": delta.content}
    if delta.thinking:
        body["thinking"] = delta.thinking
    return body


def render(
    parsed: Parsed[GenerationRequest, Started],
    meta: Meta,
    events: Sequence[GenerationEvent],
    now_ns: Clock = time.perf_counter_ns,
) -> dict[str, Any]:
    return render_reply(parsed, meta, events, fields, now_ns)


class GenerateStream(NdjsonStream):
    def fields(self, delta: Delta) -> dict[str, Any]:
        return fields(delta)


ROUTE = GenerateRoute(path="/api/generate", parse=parse, render=render, encoder=GenerateStream, body=GenerateBody)
