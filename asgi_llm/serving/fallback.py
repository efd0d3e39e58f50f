"""A generation's way through its model's fallback chain (`fallbacks` in a model's settings).

A model that fails before its first event — nothing has reached the client yet — hands the same
request to the next model of its chain: an upstream whose replicas are all down, answer 5xx,
time out or answer 429 (the upstream engine has tried every replica by then), or a local model
that cannot load or whose queue is full. Once an event has gone out there is no retry: the
failure ends the stream with the protocol's error event, as it would without a chain. Each
request starts with its own model, so a model that recovers serves again at once.

The response names the model that served it (its `model`, the usage record) and carries
`x-asgi-llm-fallback`, naming the models that failed before it.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncGenerator, Callable, Sequence
from typing import Any

from ..core import Engine, EngineEvent, GenerationRequest, LLMError, PromptRead
from ..http.asgi import Message, Send
from ..pool import ModelPool

__all__ = ["FALLBACK_HEADER", "Fallbacks", "falls_back"]

log = logging.getLogger("asgi_llm.endpoint")

FALLBACK_HEADER = "x-asgi-llm-fallback"

Check = Callable[[Engine, str], None]
"""Raises when this engine (this model id) cannot take the request (its context is too small)."""


def falls_back(error: LLMError) -> bool:
    """Errors another model may do better on: the server's side (5xx: unreachable, failing,
    timed out, overloaded, not loaded) and a rate limit; never the request's own fault (4xx)."""
    return error.status >= 500 or error.status == 429


class Fallbacks:
    """One generation request on `chain` (model ids, its own first): `events` tries each in turn
    until one yields an event; `model` is the one serving (or last tried), `failed` those that
    failed before it."""

    def __init__(
        self,
        pool: ModelPool,
        chain: list[str],
        keep_alive: float | None,
        check: Check,
        watchers: Sequence[Callable[[str], None]] = (),
    ) -> None:
        self._pool = pool
        self._chain = chain
        self._keep_alive = keep_alive
        self._check = check
        self._watchers = tuple(watchers)  # called with each model as it is tried (the usage meter names the last)
        self.model = chain[0]
        self.failed: list[str] = []

    async def events(self, request: GenerationRequest) -> AsyncGenerator[EngineEvent, None]:
        reason: LLMError | None = None  # why the last model that failed did
        for index, model in enumerate(self._chain):
            started = False
            try:
                async with self._pool.use(model, keep_alive=self._keep_alive) as (engine, model_id):
                    self.model = model_id
                    for watcher in self._watchers:
                        watcher(model_id)
                    self._check(engine, model_id)
                    held: list[EngineEvent] = []  # the prompt's size, kept until this model has answered
                    async with contextlib.aclosing(engine.generate(request)) as stream:
                        async for event in stream:
                            if not started and isinstance(event, PromptRead):
                                held.append(event)
                                continue
                            if not started:
                                started = True
                                for kept in held:
                                    yield kept
                            yield event
                    return
            except LLMError as error:
                if started or (index == 0 and not falls_back(error)):
                    raise
                if falls_back(error):
                    reason = error
                    self.failed.append(model)
                    log.warning("model %s failed before its first byte: %s", model, error.message)
                else:  # a fallback that cannot take this request (its context is too small)
                    log.warning("fallback model %s cannot serve this request: %s", model, error.message)
                if index == len(self._chain) - 1 and reason is not None:
                    raise reason from None


def with_fallback_header(send: Send, fallbacks: Fallbacks) -> Send:
    """`send`, adding `x-asgi-llm-fallback` (the models that failed, in order) to the response's
    start when a fallback served."""

    async def marked(message: Message) -> None:
        if message["type"] == "http.response.start" and fallbacks.failed:
            value = ", ".join(fallbacks.failed).encode("latin-1", "replace")
            headers: list[Any] = [*message.get("headers", ()), (FALLBACK_HEADER.encode(), value)]
            message = {**message, "headers": headers}
        await send(message)

    return marked
