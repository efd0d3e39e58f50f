"""The routes that ask a loaded model something besides generating and tokenizing: `/rerank`,
and its LoRA adapters (`/lora-adapters`). The endpoint calls these with the decoded body; it owns
the disconnect watch and answers errors in the request's protocol."""

from __future__ import annotations

import time
import urllib.parse
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from ..adapters.base import LoraRoute, Meta, RerankRoute
from ..core import Forbidden, ModelNotFound, RerankResult, Unsupported, Usage
from ..http.asgi import Scope, Send, send_json
from ..http.context import Meter, request_context, request_info
from ..pool import ModelPool

__all__ = ["lora_adapters", "rerank"]

Until = Callable[[Callable[[], Awaitable[RerankResult]]], Awaitable[RerankResult]]
"""Runs the work unless the client leaves first (the endpoint's disconnect watch)."""


async def rerank(pool: ModelPool, route: RerankRoute[Any], body: Any, meter: Meter, until: Until, send: Send) -> None:
    """Scored like embeddings are counted: the prompt tokens read, no completion."""
    parsed = route.parse(body)
    async with pool.use(parsed.request.model, keep_alive=parsed.keep_alive) as (engine, model_id):
        meter.serving(model_id)
        if engine.rerank_kind is None:
            message = f"The model '{model_id}' can rank documents neither by rank pooling nor by judging."
            raise Unsupported(message, param="model")
        result = await until(lambda: engine.rerank(parsed.request))
        meter.usage(Usage(prompt_tokens=result.prompt_tokens, completion_tokens=0))
    meta = Meta(request_id=uuid.uuid4().hex[:24], created=int(time.time()), model=model_id)
    await send_json(send, 200, route.render(parsed, meta, result))


async def lora_adapters(
    pool: ModelPool, route: LoraRoute, scope: Scope, body: Any, first: Callable[[], str], meter: Meter, send: Send
) -> None:
    """GET lists the model's adapters and default scales; POST sets those it names (operator keys
    only, as the admin routes: it changes what every key's requests get). The model is the query's
    `model`, else `first()`: the first one the caller may use."""
    key, resolve = request_context(scope).key, request_info(scope).resolve_model
    query = dict(urllib.parse.parse_qsl(bytes(scope.get("query_string", b"")).decode("latin-1")))
    model = query.get("model") or first()
    if key is not None and not key.may_use(model, resolve):
        raise ModelNotFound(model)
    scales = None
    if scope["method"] == "POST":
        if key is not None and not key.operator:
            raise Forbidden("Only an operator API key may set the LoRA adapters' default scales.")
        scales = route.parse(body)
    async with pool.use(model) as (engine, model_id):
        meter.serving(model_id)
        adapters = engine.lora
        if adapters is None:
            raise Unsupported(f"The model '{model_id}' has no LoRA adapters to list or set.", param="model")
        if scales is not None:
            adapters.set_defaults(scales)
        listing = adapters.listing()
    await send_json(send, 200, route.render(model_id, listing))
