"""The one endpoint glue every protocol shares: body → parse → pool → render or stream.

Written once; adapters stay pure. It watches for `http.disconnect` the whole time,
so a client that leaves stops its generation at the next token.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
import urllib.parse
import uuid
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from typing import Any, TypeVar

import anyio

from ..adapters.base import (
    CountRoute,
    EmbedRoute,
    GenerateRoute,
    InfoContext,
    InfoRoute,
    LoraRoute,
    Meta,
    Parsed,
    RerankRoute,
    Route,
    StateRoute,
    StateStore,
    Streamed,
    StreamEncoder,
    TokenizerRoute,
)
from ..core import (
    DetokenizeRequest,
    Engine,
    EngineEvent,
    GenerationEvent,
    InternalError,
    InvalidRequest,
    LLMError,
    PromptRead,
    Queued,
    TemplateRequest,
    Tokenizer,
    TokenizerRequest,
    TokenizerResult,
    Unsupported,
    Usage,
)
from ..core.catalog import ModelCard
from ..core.embedding_sizes import embedding_size, shortened
from ..core.policy import KeyInfo
from ..http.asgi import Receive, Scope, Send, send_json, send_text, start_stream
from ..http.body import ClientGone, json_body
from ..http.context import InProcessCall, Meter, RequestContext, request_context, request_info, send_error
from ..pool import ModelPool
from ..storage.state import owned_by
from .background import BackgroundRuns, send_streamed
from .fallback import Fallbacks, with_fallback_header
from .model_routes import lora_adapters, rerank

__all__ = ["Endpoint"]

log = logging.getLogger("asgi_llm.endpoint")
T = TypeVar("T")


class _Disconnected(Exception):
    pass


async def _until_disconnect(receive: Receive, work: Callable[[], Awaitable[T]]) -> T:
    """Run `work`, cancelling it if the client disconnects first."""
    result: list[T] = []
    failure: Exception | None = None

    async with anyio.create_task_group() as group:

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            group.cancel_scope.cancel()

        group.start_soon(watch)
        try:
            result.append(await work())
        except Exception as exc:  # noqa: BLE001 (re-raised below, outside the task group's exception group)
            failure = exc
        group.cancel_scope.cancel()
    if failure is not None:
        raise failure
    if not result:
        raise _Disconnected()
    return result[0]


class Endpoint:
    def __init__(self, pool: ModelPool, store: StateStore, max_body_bytes: int) -> None:
        self._pool = pool
        self._store = store
        self._limit = max_body_bytes
        self.runs = BackgroundRuns(store)  # background Responses: siblings share the first app's

    async def __call__(self, route: Route, params: Mapping[str, str], scope: Scope, receive: Receive, send: Send) -> None:
        """Errors leave in the request's protocol envelope (its `RequestInfo`), as the layers' do."""
        try:
            await self._dispatch(route, params, scope, receive, send)
        except (_Disconnected, ClientGone):
            log.info("client disconnected")
        except LLMError as error:
            await send_error(scope, send, request_info(scope), error)
        except Exception:
            log.exception("unexpected error serving %s", scope.get("path"))
            failure = InternalError("The server had an error while processing your request.")
            await send_error(scope, send, request_info(scope), failure)

    async def _dispatch(self, route: Route, params: Mapping[str, str], scope: Scope, receive: Receive, send: Send) -> None:
        context = request_context(scope)
        meter = context.meter or Meter()  # the usage and limits layers read it afterwards
        store = owned_by(self._store, None if context.key is None else context.key.name)
        has_body = scope["method"] not in ("GET", "HEAD", "DELETE") and not isinstance(route, StateRoute)
        body = await json_body(scope, receive, self._limit) if has_body else None
        if isinstance(route, (InfoRoute, StateRoute)):
            headers = {bytes(k).decode("latin-1").lower(): bytes(v).decode("latin-1") for k, v in scope.get("headers", ())}
            query = dict(urllib.parse.parse_qsl(bytes(scope.get("query_string", b"")).decode("latin-1")))
            catalog = _visible(self._pool.catalog(), context.key, request_info(scope).resolve_model)
            asked = InfoContext(catalog, params, headers, body, query, self.runs.owned_by(context.key, store))
            if isinstance(route, InfoRoute):
                status, reply = route.handle(asked)
            else:
                status, reply = await route.handle(asked, store)
            if isinstance(reply, Streamed):
                await _until_disconnect(receive, lambda: send_streamed(send, reply))
                return
            await (send_text(send, status, reply) if isinstance(reply, str) else send_json(send, status, reply))
            return
        if isinstance(route, EmbedRoute):
            await self._embed(route, body, meter, context, receive, send)
        elif isinstance(route, TokenizerRoute):
            await self._tokenizer(route, body, meter, scope, receive, send)
        elif isinstance(route, RerankRoute):
            await rerank(self._pool, route, body, meter, lambda work: _until_disconnect(receive, work), send)
        elif isinstance(route, LoraRoute):
            first = lambda: _first(_visible(self._pool.catalog(), context.key, request_info(scope).resolve_model))
            await lora_adapters(self._pool, route, scope, body, first, meter, send)
        elif isinstance(route, CountRoute):
            parsed = route.parse(body)
            if route.resolve is not None:
                parsed = await route.resolve(parsed, store)
            async with self._pool.use(parsed.request.model, keep_alive=parsed.keep_alive) as (engine, model_id):
                meter.serving(model_id)
                count = await _until_disconnect(receive, lambda: engine.count_tokens(parsed.request))
            await send_json(send, 200, route.render(parsed, count))
        else:
            trace, call = context.request_id, context.in_process
            await self._generate(route, body, meter, context, store, trace, call, receive, send)

    async def _tokenizer(
        self, route: TokenizerRoute[Any], body: Any, meter: Meter, scope: Scope, receive: Receive, send: Send
    ) -> None:
        parsed = route.parse(body)
        name = parsed.request.model
        if name is None:  # llama-server's shape names none: the first model this caller may use
            name = _first(_visible(self._pool.catalog(), request_context(scope).key, request_info(scope).resolve_model))
        async with self._pool.use(name) as (engine, model_id):
            meter.serving(model_id)
            asked = engine.tokenizer()
            result = await _until_disconnect(receive, lambda: _ask(asked, parsed.request, engine.context_length))
        await send_json(send, 200, route.render(parsed, result))

    async def _embed(
        self,
        route: EmbedRoute[Any],
        body: Any,
        meter: Meter,
        context: RequestContext,
        receive: Receive,
        send: Send,
    ) -> None:
        parsed, trace, call = route.parse(body), context.request_id, context.in_process
        if context.trace is not None:
            context.trace.asked(parsed.request)
        async with self._pool.use(parsed.request.model, keep_alive=parsed.keep_alive) as (engine, model_id):
            meta = _meta(model_id, trace)
            meter.serving(model_id)
            _check_context(parsed, engine, model_id)
            if not engine.supports_embeddings:
                raise Unsupported(f"The model '{model_id}' does not serve embeddings.", param="model")
            listed = next((m.embedding_dimensions for m in self._pool.settings.models if m.id == model_id), ())
            size = embedding_size(parsed.request, listed, model_id)  # core/embedding_sizes.py
            result = await _until_disconnect(receive, lambda: engine.embed(parsed.request))
            result = result if size is None else shortened(result, size, model_id)
            meter.usage(Usage(prompt_tokens=result.prompt_tokens, completion_tokens=0))
        if call is not None:
            call.model = model_id
            await call.deliver(result)
            await send_json(send, 200, {})
            return
        await send_json(send, 200, route.render(parsed, meta, result))

    async def _generate(
        self,
        route: GenerateRoute[Any, Any],
        body: Any,
        meter: Meter,
        context: RequestContext,
        store: StateStore,
        trace: str,
        call: InProcessCall | None,
        receive: Receive,
        send: Send,
    ) -> None:
        parsed, notes = _capped(route.parse(body), context.max_tokens), context.trace
        if route.resolve is not None:
            parsed = await route.resolve(parsed, store)
        if notes is not None:
            notes.asked(parsed.request)
        if parsed.background:  # answered at once, then generated on (background.py)
            await self.runs.run(self._pool, route, parsed, context, meter, store, send)
            return
        if parsed.load_only:
            async with self._pool.use(parsed.request.model, keep_alive=parsed.keep_alive) as (engine, model_id):
                meter.serving(model_id)
                _check_context(parsed, engine, model_id)
                await send_json(send, 200, route.render(parsed, _meta(model_id, trace), []))
            return
        chain = self._pool.chain(parsed.request.model)  # the model, then its fallbacks (fallback.py)
        serving = Fallbacks(self._pool, chain, parsed.keep_alive, lambda e, m: _check_context(parsed, e, m))
        serving.watchers += [meter.serving] if call is None else [meter.serving, lambda m: setattr(call, "model", m)]
        send, meta = with_fallback_header(send, serving), _meta(serving.model, trace)
        events = serving.events(parsed.request)
        if notes is not None:
            events = notes.watch(events)
        async with contextlib.aclosing(events):
            if call is not None:
                await _until_disconnect(receive, lambda: _hand_over(events, meter, call, send))
            elif parsed.stream:
                await _until_disconnect(receive, lambda: self._stream(route, parsed, meta, events, meter, store, send, serving))
            else:
                collected = await _until_disconnect(receive, lambda: _collect(events, meter))
                final = route.render(parsed, dataclasses.replace(meta, model=serving.model), collected)
                await _record(route, parsed, final, store)  # before the client can ask for it
                await send_json(send, 200, final)

    async def _stream(
        self,
        route: GenerateRoute[Any, Any],
        parsed: Any,
        meta: Meta,
        events: AsyncGenerator[EngineEvent, None],
        meter: Meter,
        store: StateStore,
        send: Send,
        serving: Fallbacks,
    ) -> None:
        """Stream the events; a stream that completes is recorded before its last bytes go out.
        A request that waits for the model gets its headers (and, over SSE, keep-alive comments)
        at once; errors before that get a status, those after it an error event."""
        waiting: StreamEncoder | None = None  # set once a waiting stream's headers went out
        try:
            first = await events.__anext__()
            while isinstance(first, (PromptRead, Queued)):
                if isinstance(first, Queued):
                    meta = dataclasses.replace(meta, model=serving.model)  # the model that took it
                    waiting = await _keep_alive(waiting or route.encoder(parsed, meta), waiting is None, send)
                else:  # the prompt's size, for the stream's opening
                    meta = dataclasses.replace(meta, prompt=Usage(first.tokens, 0, first.cached))
                first = await events.__anext__()
        except Exception as error:
            if waiting is None:
                raise
            if not isinstance(error, LLMError):
                log.exception("generation failed before its first token")
                error = InternalError("The server had an error while generating.")
            meter.failed = error.status
            tail = waiting.open() + waiting.error(error)
            await send({"type": "http.response.body", "body": tail, "more_body": False})
            return
        encoder = route.encoder(parsed, dataclasses.replace(meta, model=serving.model))
        meter.event(first)
        if waiting is None:
            await start_stream(send, encoder.media_type)
        try:
            await send({"type": "http.response.body", "body": encoder.open() + encoder.event(first), "more_body": True})
            async for event in events:
                if isinstance(event, (PromptRead, Queued)):
                    continue  # another prompt's (completions); its count arrives with its finish
                meter.event(event)
                await send({"type": "http.response.body", "body": encoder.event(event), "more_body": True})
            tail = encoder.close()
            await _record(route, parsed, encoder.final(), store)
        except LLMError as error:
            meter.failed = error.status
            tail = encoder.error(error)
        except Exception:
            log.exception("generation failed mid-stream")
            meter.failed = InternalError.status
            tail = encoder.error(InternalError("The server had an error while generating."))
        await send({"type": "http.response.body", "body": tail, "more_body": False})


async def _keep_alive(encoder: StreamEncoder, first: bool, send: Send) -> StreamEncoder:
    """A waiting stream's headers (the first time) and an SSE comment line, which SSE clients
    skip. NDJSON has no line its clients skip (the Ollama SDK parses every line as JSON), so an
    Ollama stream gets its headers and then nothing until its first line."""
    if first:
        await start_stream(send, encoder.media_type)
    if encoder.media_type == "text/event-stream":
        await send({"type": "http.response.body", "body": b": queued\n\n", "more_body": True})
    return encoder


async def _hand_over(events: AsyncGenerator[EngineEvent, None], meter: Meter, call: InProcessCall, send: Send) -> None:
    """The core events, as they come, to host code in this process: no encoding, no bytes."""
    await send({"type": "http.response.start", "status": 200, "headers": []})  # for the usage record
    async for event in events:
        if not isinstance(event, Queued):
            if not isinstance(event, PromptRead):
                meter.event(event)
            await call.deliver(event)
    await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _record(route: GenerateRoute[Any, Any], parsed: Any, final: Any, store: StateStore) -> None:
    if route.record is not None and final is not None:
        await route.record(parsed, final, store)


def _visible(catalog: list[ModelCard], key: KeyInfo | None, resolve: Callable[[str], str | None]) -> list[ModelCard]:
    """The models a key may use, for model lists: a key limited to some models sees only those."""
    if key is None:
        return catalog
    return [card for card in catalog if key.may_use(card.id, resolve)]


def _first(catalog: list[ModelCard]) -> str:
    if not catalog:
        raise InvalidRequest("Missing required parameter: 'model'; no model is served to this key.", param="model")
    return catalog[0].id


async def _ask(tokenizer: Tokenizer, request: TokenizerRequest, context_length: int) -> TokenizerResult:
    if isinstance(request, TemplateRequest):
        return TokenizerResult(prompt=await tokenizer.render_chat(request.chat))
    if isinstance(request, DetokenizeRequest):
        return TokenizerResult(request.tokens, tuple(await tokenizer.pieces(request.tokens)))
    text, add, parse = request.text, request.add_special, request.parse_special
    tokens = await tokenizer.tokenize(text, add_special=add, parse_special=parse)
    pieces = await tokenizer.pieces(tokens) if request.pieces else []
    return TokenizerResult(tuple(tokens), tuple(pieces), context_length)


def _meta(model_id: str, trace: str) -> Meta:
    return Meta(request_id=uuid.uuid4().hex[:24], created=int(time.time()), model=model_id, trace=trace)


async def _collect(events: AsyncGenerator[EngineEvent, None], meter: Meter) -> list[GenerationEvent]:
    collected: list[GenerationEvent] = []
    async for event in events:
        if isinstance(event, (PromptRead, Queued)):
            continue  # a whole reply carries the prompt's count in its usage
        meter.event(event)
        collected.append(event)
    return collected


def _check_context(parsed: Parsed[Any, Any], engine: Engine, model_id: str) -> None:
    need = parsed.needs_context
    if need is not None and need.tokens > engine.context_length:
        raise InvalidRequest(
            f"'{need.param}' asks for {need.tokens} tokens of context; the model '{model_id}' has "
            f"{engine.context_length} (its n_ctx, set in the server's configuration).",
            param=need.param,
        )


def _capped(parsed: Parsed[Any, Any], cap: int | None) -> Parsed[Any, Any]:
    """A per-key `max_tokens` cap: the default for requests naming none, a 400 above it naming
    the field the client sent (`max_completion_tokens`, `options.num_predict`...)."""
    sampling = parsed.request.sampling
    if cap is None or (sampling.max_tokens is not None and sampling.max_tokens <= cap):
        return parsed
    if sampling.max_tokens is not None:
        field = sampling.max_tokens_param
        raise InvalidRequest(
            f"'{field}' is {sampling.max_tokens}, more than this API key's limit of {cap}.", param=field
        )
    request = dataclasses.replace(parsed.request, sampling=dataclasses.replace(sampling, max_tokens=cap))
    return dataclasses.replace(parsed, request=request)
