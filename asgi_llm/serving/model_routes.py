"""The routes that ask a loaded model something besides generating: embeddings, a prompt's token
count, its tokenizer and chat template, `/rerank`, and its LoRA adapters (`/lora-adapters`). One
handler a route kind, which the endpoint looks up by the route's type; each checks by type that
the model's engine has the ability the route needs (core/engine.py), and answers in the
request's protocol through the endpoint, which owns the error envelope."""

from __future__ import annotations

import dataclasses
import urllib.parse
from typing import Any

from ..adapters.base import CountRoute, EmbedRoute, LoraRoute, RerankRoute, TokenizerRoute
from ..core import (
    DetokenizeRequest,
    Embedder,
    Forbidden,
    LoraOwner,
    ModelNotFound,
    Reranker,
    TemplateRequest,
    Tokenizer,
    TokenizerOwner,
    TokenizerRequest,
    TokenizerResult,
    Unsupported,
    Usage,
)
from ..core.embedding_sizes import embedding_size, shortened
from ..http.asgi import send_json
from ..http.context import request_info
from .call import Call, check_context, meta
from .images import check_images, image_rules, read_images

__all__ = ["count", "embed", "lora_adapters", "rerank", "tokenize"]


async def embed(route: EmbedRoute[Any], call: Call) -> None:
    """A model serves embeddings where its engine is an `Embedder` and its config says so."""
    parsed, context = route.parse(await call.body()), call.context
    if context.trace is not None:
        context.trace.asked(parsed.request)
    async with call.pool.use(parsed.request.model, keep_alive=parsed.keep_alive) as (engine, model_id):
        started = meta(model_id, context.request_id)
        call.meter.serving(model_id)
        check_context(parsed, engine, model_id)
        config = next((m for m in call.pool.settings.models if m.id == model_id), None)
        if not (isinstance(engine, Embedder) and config is not None and config.embeddings):
            raise Unsupported(f"The model '{model_id}' does not serve embeddings.", param="model")
        size = embedding_size(parsed.request, config.embedding_dimensions, model_id)  # core/embedding_sizes.py
        result = await call.until(lambda: engine.embed(parsed.request))
        result = result if size is None else shortened(result, size, model_id)
        call.meter.usage(Usage(prompt_tokens=result.prompt_tokens, completion_tokens=0))
    if (in_process := context.in_process) is not None:
        in_process.serving(model_id)
        await in_process.deliver(result)
        await send_json(call.send, 200, {})
        return
    await send_json(call.send, 200, route.render(parsed, started, result))


async def count(route: CountRoute[Any, Any], call: Call) -> None:
    """A prompt's tokens, its chat template applied, without generating."""
    parsed = route.parse(await call.body())
    if route.resolve is not None:
        parsed = await route.resolve(parsed, call.store)
    rules = image_rules(call.pool.settings)
    request = await call.until(lambda: read_images(parsed.request, rules))
    async with call.pool.use(request.model, keep_alive=parsed.keep_alive) as (engine, model_id):
        call.meter.serving(model_id)
        check_images(request, engine, model_id)
        parsed = dataclasses.replace(parsed, request=request)
        tokens = await call.until(lambda: engine.count_tokens(parsed.request))
    await send_json(call.send, 200, route.render(parsed, tokens))


async def tokenize(route: TokenizerRoute[Any], call: Call) -> None:
    """A model's tokenizer or chat template, asked without decoding; a request that names no model
    (llama-server's shape) asks the first one the caller may use."""
    parsed = route.parse(await call.body())
    name = parsed.request.model
    async with call.pool.use(call.first_model() if name is None else name) as (engine, model_id):
        call.meter.serving(model_id)
        if not isinstance(engine, TokenizerOwner):
            raise Unsupported(
                f"/tokenize, /detokenize and /apply-template are not available for '{model_id}': "
                "its engine has no tokenizer to ask here.",
                param="model",
            )
        asked = engine.tokenizer()
        result = await call.until(lambda: _ask(asked, parsed.request, engine.context_length))
    await send_json(call.send, 200, route.render(parsed, result))


async def rerank(route: RerankRoute[Any], call: Call) -> None:
    """Scored like embeddings are counted: the prompt tokens read, no completion."""
    parsed = route.parse(await call.body())
    async with call.pool.use(parsed.request.model, keep_alive=parsed.keep_alive) as (engine, model_id):
        call.meter.serving(model_id)
        if not isinstance(engine, Reranker):
            message = f"The model '{model_id}' can rank documents neither by rank pooling nor by judging."
            raise Unsupported(message, param="model")
        result = await call.until(lambda: engine.rerank(parsed.request))
        call.meter.usage(Usage(prompt_tokens=result.prompt_tokens, completion_tokens=0))
    await send_json(call.send, 200, route.render(parsed, meta(model_id), result))


async def lora_adapters(route: LoraRoute, call: Call) -> None:
    """GET lists the model's adapters and default scales; POST sets those it names (operator keys
    only, as the admin routes: it changes what every key's requests get). The model is the query's
    `model`, else the first one the caller may use."""
    scope, key, body = call.scope, call.context.key, await call.body()
    query = dict(urllib.parse.parse_qsl(bytes(scope.get("query_string", b"")).decode("latin-1")))
    model = query.get("model") or call.first_model()
    if key is not None and not key.may_use(model, request_info(scope).resolve_model):
        raise ModelNotFound(model)
    scales = None
    if scope["method"] == "POST":
        if key is not None and not key.operator:
            raise Forbidden("Only an operator API key may set the LoRA adapters' default scales.")
        scales = route.parse(body)
    async with call.pool.use(model) as (engine, model_id):
        call.meter.serving(model_id)
        if not isinstance(engine, LoraOwner):
            raise Unsupported(f"The model '{model_id}' has no LoRA adapters to list or set.", param="model")
        adapters = engine.adapters()
        if scales is not None:
            adapters.set_defaults(scales)
        listing = adapters.listing()
    await send_json(call.send, 200, route.render(model_id, listing))


async def _ask(tokenizer: Tokenizer, request: TokenizerRequest, context_length: int) -> TokenizerResult:
    if isinstance(request, TemplateRequest):
        return TokenizerResult(prompt=await tokenizer.render_chat(request.chat))
    if isinstance(request, DetokenizeRequest):
        return TokenizerResult(request.tokens, tuple(await tokenizer.pieces(request.tokens)))
    text, add, parse = request.text, request.add_special, request.parse_special
    tokens = await tokenizer.tokenize(text, add_special=add, parse_special=parse)
    pieces = await tokenizer.pieces(tokens) if request.pieces else []
    return TokenizerResult(tuple(tokens), tuple(pieces), context_length)
