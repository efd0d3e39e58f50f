"""The one endpoint glue every protocol shares: body → parse → pool → render or stream.

Written once; adapters stay pure. Each route kind has one handler, looked up by the route's
type: the generations and the catalog's and the stored state's routes here, the routes that
ask a model something else in model_routes.py. It watches for `http.disconnect` the whole time,
so a client that leaves stops its generation at the next token.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
import urllib.parse
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from typing import Any

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
    Engine,
    EngineEvent,
    GenerationEvent,
    InternalError,
    InvalidRequest,
    LLMError,
    PromptRead,
    Queued,
    Usage,
)
from ..http.asgi import Receive, Scope, Send, send_json, send_text, start_stream
from ..http.body import ClientGone
from ..http.context import InProcessCall, Meter, request_context, request_info, send_error
from ..pool import ModelPool
from ..storage.state import owned_by
from .background import BackgroundRuns, send_streamed
from .call import Call, Disconnected, check_context, meta
from .fallback import Fallbacks, with_fallback_header
from .images import check_images, image_rules, read_images
from .model_routes import count, embed, lora_adapters, rerank, tokenize

__all__ = ["Endpoint"]

log = logging.getLogger("asgi_llm.endpoint")

Handler = Callable[[Any, Call], Awaitable[None]]
"""Serves one kind of route (the route, and the request on it)."""


class Endpoint:
    def __init__(
        self, pool: ModelPool, store: StateStore, max_body_bytes: int, *, runs: BackgroundRuns | None = None
    ) -> None:
        self._pool = pool
        self._store = store
        self._limit = max_body_bytes
        self.runs = runs or BackgroundRuns(store)
        """Background Responses: an app's siblings share its `runs` (one registry per store)."""
        self._handlers: dict[type, Handler] = {
            GenerateRoute: self._generate,
            EmbedRoute: embed,
            CountRoute: count,
            TokenizerRoute: tokenize,
            RerankRoute: rerank,
            LoraRoute: lora_adapters,
            InfoRoute: self._info,
            StateRoute: self._state,
        }
        """One handler a route kind (adapters/base.py's `Route`), found by the route's type."""

    async def __call__(
        self, route: Route, params: Mapping[str, str], scope: Scope, receive: Receive, send: Send
    ) -> None:
        """Errors leave in the request's protocol envelope (its `RequestInfo`), as the layers' do."""
        try:
            context = request_context(scope)
            store = owned_by(self._store, None if context.key is None else context.key.name)
            meter = context.meter or Meter()  # the usage and limits layers read it afterwards
            call = Call(self._pool, scope, receive, send, params, context, meter, store, self._limit)
            await self._handler(route)(route, call)
        except (Disconnected, ClientGone):
            log.info("client disconnected")
        except LLMError as error:
            await send_error(scope, send, request_info(scope), error)
        except Exception:
            log.exception("unexpected error serving %s", scope.get("path"))
            failure = InternalError("The server had an error while processing your request.")
            await send_error(scope, send, request_info(scope), failure)

    def _handler(self, route: Route) -> Handler:
        for kind in type(route).__mro__:  # a route kind's subclass is served as its kind
            if (handler := self._handlers.get(kind)) is not None:
                return handler
        raise TypeError(f"no handler serves a {type(route).__name__}")

    async def _info(self, route: InfoRoute, call: Call) -> None:
        """Answered from the model catalog alone; never waits for a model."""
        status, reply = route.handle(self._asked(call, await call.body()))
        await _reply(call, status, reply)

    async def _state(self, route: StateRoute, call: Call) -> None:
        """Reads or changes the stored state; no body is read."""
        status, reply = await route.handle(self._asked(call, None), call.store)
        await _reply(call, status, reply)

    def _asked(self, call: Call, body: Any) -> InfoContext:
        scope, key = call.scope, call.context.key
        headers = {bytes(k).decode("latin-1").lower(): bytes(v).decode("latin-1") for k, v in scope.get("headers", ())}
        query = dict(urllib.parse.parse_qsl(bytes(scope.get("query_string", b"")).decode("latin-1")))
        return InfoContext(call.catalog(), call.params, headers, body, query, self.runs.owned_by(key, call.store))

    async def _generate(self, route: GenerateRoute[Any, Any], call: Call) -> None:
        context, meter, store, send = call.context, call.meter, call.store, call.send
        parsed, notes = _capped(route.parse(await call.body()), context.max_tokens), context.trace
        if route.resolve is not None:
            parsed = await route.resolve(parsed, store)
        rules = image_rules(self._pool.settings)  # a fetch stops when the client leaves
        request = await call.until(lambda: read_images(parsed.request, rules))
        parsed = dataclasses.replace(parsed, request=request) if request is not parsed.request else parsed
        if notes is not None:
            notes.asked(parsed.request)
        if parsed.background:  # answered at once, then generated on (background.py)
            await self.runs.run(self._pool, route, parsed, context, meter, store, send)
            return
        if parsed.load_only:
            async with self._pool.use(parsed.request.model, keep_alive=parsed.keep_alive) as (engine, model_id):
                meter.serving(model_id)
                check_context(parsed, engine, model_id)
                await send_json(send, 200, route.render(parsed, meta(model_id, context.request_id), []))
            return
        in_process = context.in_process
        chain = self._pool.chain(parsed.request.model)  # the model, then its fallbacks (fallback.py)
        watchers = [meter.serving] if in_process is None else [meter.serving, in_process.serving]

        def checked(engine: Engine, model_id: str) -> None:
            check_context(parsed, engine, model_id)
            check_images(parsed.request, engine, model_id)

        serving = Fallbacks(self._pool, chain, parsed.keep_alive, checked, watchers)
        send, started = with_fallback_header(send, serving), meta(serving.model, context.request_id)
        events = serving.events(parsed.request)
        if notes is not None:
            events = notes.watch(events)
        async with contextlib.aclosing(events):
            if in_process is not None:
                await call.until(lambda: _hand_over(events, meter, in_process, send))
            elif parsed.stream:
                await call.until(lambda: self._stream(route, parsed, started, events, meter, store, send, serving))
            else:
                collected, decoded = await call.until(lambda: _collect(events, meter))
                final = route.render(
                    parsed, dataclasses.replace(started, model=serving.model, decoded=decoded), collected
                )
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
            meter.fail(error.status)
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
            meter.fail(error.status)
            tail = encoder.error(error)
        except Exception:
            log.exception("generation failed mid-stream")
            meter.fail(InternalError.status)
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


async def _reply(call: Call, status: int, reply: Any) -> None:
    if isinstance(reply, Streamed):
        await call.until(lambda: send_streamed(call.send, reply))
    elif isinstance(reply, str):
        await send_text(call.send, status, reply)
    else:
        await send_json(call.send, status, reply)


async def _record(route: GenerateRoute[Any, Any], parsed: Any, final: Any, store: StateStore) -> None:
    if route.record is not None and final is not None:
        await route.record(parsed, final, store)


async def _collect(
    events: AsyncGenerator[EngineEvent, None], meter: Meter
) -> tuple[list[GenerationEvent], tuple[int, int] | None]:
    """A whole reply's events, and when its first and last came (`Meta.decoded`)."""
    collected: list[GenerationEvent] = []
    first = last = 0
    async for event in events:
        if isinstance(event, (PromptRead, Queued)):
            continue  # a whole reply carries the prompt's count in its usage
        last = time.perf_counter_ns()
        first = first or last
        meter.event(event)
        collected.append(event)
    return collected, (first, last) if collected else None


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
