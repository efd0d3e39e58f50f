"""One request as the endpoint's route handlers see it (`Call`), and what they share: the watch
for `http.disconnect` around their work (`until_disconnect`), the models a caller may see, the
context a request needs of its model, and the facts fixed when a response starts."""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio

from ..adapters.base import Meta, Parsed, StateStore
from ..core import Engine, InvalidRequest
from ..core.catalog import ModelCard
from ..http.asgi import Receive, Scope, Send
from ..http.body import json_body
from ..http.context import Meter, RequestContext, request_info
from ..pool import ModelPool

__all__ = ["Call", "Disconnected", "check_context", "meta", "until_disconnect"]

T = TypeVar("T")


class Disconnected(Exception):
    """The client left before the work it waited for was done."""


async def until_disconnect(receive: Receive, work: Callable[[], Awaitable[T]]) -> T:
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
        raise Disconnected()
    return result[0]


@dataclass(frozen=True)
class Call:
    """One request on one route: the ASGI call, the route's path parameters, what the layers put
    in its context, its usage meter and the caller's view of the stored state."""

    pool: ModelPool
    scope: Scope
    receive: Receive
    send: Send
    params: Mapping[str, str]
    context: RequestContext
    meter: Meter
    store: StateStore
    max_body_bytes: int

    async def body(self) -> Any:
        """The decoded JSON body (read once, or decoded already by a layer), or None for a method
        that carries none."""
        if self.scope["method"] in ("GET", "HEAD", "DELETE"):
            return None
        return await json_body(self.scope, self.receive, self.max_body_bytes)

    async def until(self, work: Callable[[], Awaitable[T]]) -> T:
        """`work`, cancelled if the client disconnects first (then `Disconnected`)."""
        return await until_disconnect(self.receive, work)

    def catalog(self) -> list[ModelCard]:
        """The models this caller may use, for model lists: a key limited to some sees only those."""
        key, catalog = self.context.key, self.pool.catalog()
        if key is None:
            return catalog
        resolve = request_info(self.scope).resolve_model
        return [card for card in catalog if key.may_use(card.id, resolve)]

    def first_model(self) -> str:
        """The first model this caller may use: the model of a request that names none
        (llama-server's shapes)."""
        catalog = self.catalog()
        if not catalog:
            raise InvalidRequest("Missing required parameter: 'model'; no model is served to this key.", param="model")
        return catalog[0].id


def check_context(parsed: Parsed[Any, Any], engine: Engine, model_id: str) -> None:
    """A request that asks for more context than its model was loaded with is refused, naming its field."""
    need = parsed.needs_context
    if need is not None and need.tokens > engine.context_length:
        raise InvalidRequest(
            f"'{need.param}' asks for {need.tokens} tokens of context; the model '{model_id}' has "
            f"{engine.context_length} (its n_ctx, set in the server's configuration).",
            param=need.param,
        )


def meta(model_id: str, trace: str | None = None) -> Meta:
    """The facts a response starts with: its id, its time, its model and the request's id."""
    return Meta(request_id=uuid.uuid4().hex[:24], created=int(time.time()), model=model_id, trace=trace)
