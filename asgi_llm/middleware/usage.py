"""Usage accounting: exactly one `UsageRecord` per request, handed to every sink.

The record is completed in `finally`, so streams, errors and clients that leave are all
counted. Tokens, the model and the first-token time come from the request's `Meter`, which
the endpoint fills in; status and disconnects are seen by wrapping `send` and `receive`
(messages pass through untouched; nothing is buffered).
"""

from __future__ import annotations

import inspect
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import anyio

from asgi_llm.http.asgi import ASGIApp, Message, Receive, Scope, Send
from asgi_llm.http.context import (
    Classify,
    Meter,
    meter_of,
    request_context,
    request_info,
    with_request_id_header,
)

__all__ = ["Sink", "UsageMiddleware", "UsageRecord"]

log = logging.getLogger("asgi_llm.usage")

CLIENT_CLOSED = 499
"""Status recorded when the client left before any response started (nginx's convention)."""


@dataclass(frozen=True)
class UsageRecord:
    id: str
    started: float
    """Unix time the request arrived."""
    key: str | None
    """The key's name; None on public routes and without auth."""
    protocol: str
    endpoint: str
    method: str
    model: str | None
    """The canonical id of the model that served it; None if none did."""
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    time_to_first_token: float | None
    """Seconds from arrival to the first generated event; None if nothing was generated."""
    duration: float
    status: int
    disconnected: bool
    """The client left before the response was complete."""
    request_id: str = ""
    """The `x-request-id` the response carried: the client's own, or one made for it."""

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


Sink = Callable[[UsageRecord], Awaitable[None] | None]
"""Receives each record once; sync or async. A failing sink is logged, never the client's problem."""


class _Exchange:
    """One request's response as seen on the wire: status, completion, disconnect."""

    def __init__(self, receive: Receive, send: Send) -> None:
        self._receive, self._send = receive, send
        self.status: int | None = None
        self.complete = False
        self.disconnected = False

    async def receive(self) -> Message:
        message = await self._receive()
        if message["type"] == "http.disconnect" and not self.complete:
            self.disconnected = True
        return message

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.status = int(message["status"])
        elif message["type"] == "http.response.body" and not message.get("more_body", False):
            self.complete = True
        try:
            await self._send(message)
        except OSError:
            self.disconnected = True
            raise

    def final_status(self) -> int:
        if self.status is not None:
            return self.status
        return CLIENT_CLOSED if self.disconnected else 500


class UsageMiddleware:
    """`UsageMiddleware(app, sinks=[ledger.record, metrics.observe, print])`; `exclude` are paths
    below the mount that are not recorded (health probes)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        sinks: Sequence[Sink] = (),
        classify: Classify | None = None,
        exclude: Collection[str] = (),
        clock: Callable[[], float] = time.time,
        timer: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.app = app
        self._sinks = tuple(sinks)
        self._classify = classify
        self._exclude = frozenset("/" + p.strip("/") for p in exclude)
        self._clock, self._timer = clock, timer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or request_info(scope, self._classify).path in self._exclude:
            await self.app(scope, receive, send)
            return
        started, began = self._clock(), self._timer()
        meter = meter_of(scope, self._timer)
        exchange = _Exchange(receive, with_request_id_header(scope, send))  # unless a part outside adds it
        try:
            await self.app(scope, exchange.receive, exchange.send)
        except anyio.get_cancelled_exc_class():  # the server (or in-process caller) gave up on the request
            exchange.disconnected = not exchange.complete
            raise
        finally:
            record = self._record(scope, meter, exchange, started, began)
            with anyio.CancelScope(shield=True):
                await self._emit(record)

    def _record(self, scope: Scope, meter: Meter, exchange: _Exchange, started: float, began: float) -> UsageRecord:
        info = request_info(scope)  # re-read: an inner layer may have named the endpoint
        context = request_context(scope)
        usage = meter.total
        first = meter.first_token_at
        return UsageRecord(
            id=uuid.uuid4().hex,
            started=started,
            key=None if context.key is None else context.key.name,
            protocol=info.protocol,
            endpoint=info.endpoint,
            method=str(scope.get("method", "")),
            model=meter.model,
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            cached_tokens=usage.cached_tokens,
            time_to_first_token=None if first is None else max(first - began, 0.0),
            duration=max(self._timer() - began, 0.0),
            status=meter.failed or exchange.final_status(),  # a stream's error event, past its 200
            disconnected=exchange.disconnected,
            request_id=context.request_id,
        )

    async def _emit(self, record: UsageRecord) -> None:
        for sink in self._sinks:
            try:
                result = sink(record)
                if inspect.isawaitable(result):
                    await result
            except Exception:
                log.exception("usage sink %r failed", sink)
