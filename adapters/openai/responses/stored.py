"""Stored Responses: retrieve (or, for a background one, follow its stream from a sequence
number), cancel, delete, and `input_items`. Following and stopping a background response is
the app's (`Runs`, given in the request's `InfoContext`): the adapter does no I/O of its own."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from asgi_llm.core import InvalidRequest, LLMError

from ...base import InfoContext, Reply, StateStore, Streamed
from .output import frames

__all__ = ["ResponseNotFound", "cancel", "delete", "input_items", "retrieve"]


class ResponseNotFound(LLMError):
    status = 404
    code = "not_found"


async def _stored(ctx: InfoContext, store: StateStore) -> dict[str, Any]:
    key = ctx.params["response_id"]
    stored = await store.get(key)
    if stored is None:
        raise ResponseNotFound(f"No response with id '{key}' found.")
    return stored


def _refuse_include(ctx: InfoContext) -> None:
    """`include` asks for more of what is stored than it holds: a stored response already holds
    its logprobs where its request asked for them, and nothing else can be added."""
    for name in ("include", "include[]"):
        if name in ctx.query:
            raise InvalidRequest(
                "'include' is not supported here: a stored response holds what its request included.", param=name
            )


async def retrieve(ctx: InfoContext, store: StateStore) -> Reply:
    """The stored object; with `stream=true`, a background response's events after `starting_after`."""
    _refuse_include(ctx)
    stored = await _stored(ctx, store)
    if ctx.query.get("stream", "false").lower() != "true":
        return 200, stored["response"]
    if not stored["response"].get("background"):
        raise InvalidRequest("Only a background response can be streamed again.", param="stream")
    raw = ctx.query.get("starting_after", "-1")
    try:
        after = int(raw)
    except ValueError:
        raise InvalidRequest(f"Invalid value for 'starting_after': '{raw}'.", param="starting_after") from None
    if ctx.runs is None:
        raise InvalidRequest("This server keeps no background responses to stream.", param="stream")
    events = ctx.runs.follow(ctx.params["response_id"], after)
    return 200, Streamed("text/event-stream", _framed(events))


async def _framed(events: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]:
    async for event in events:
        yield frames([event])


async def cancel(ctx: InfoContext, store: StateStore) -> Reply:
    """Stops a background response and frees its slot; one that has ended is answered as it is."""
    key = ctx.params["response_id"]
    stored = await _stored(ctx, store)
    if not stored["response"].get("background"):
        raise InvalidRequest("Only a background response can be cancelled.", param="response_id")
    stopped = await ctx.runs.cancel(key) if ctx.runs is not None else None
    return 200, stored["response"] if stopped is None else stopped


async def input_items(ctx: InfoContext, store: StateStore) -> Reply:
    """One page of the conversation's items: in `order` (newest first unless `asc`), those
    after the item `after`, at most `limit` (20 unless given, 1 to 100)."""
    _refuse_include(ctx)
    order = ctx.query.get("order", "desc")
    if order not in ("asc", "desc"):
        raise InvalidRequest(f"Invalid value for 'order': '{order}'; expected 'asc' or 'desc'.", param="order")
    limit = _limit(ctx.query.get("limit", "20"))
    items = (await _stored(ctx, store))["input_items"]
    if order == "desc":
        items = list(reversed(items))
    after = ctx.query.get("after")
    if after is not None:
        ids = [item["id"] for item in items]
        if after not in ids:
            raise InvalidRequest(f"Invalid value for 'after': no input item with id '{after}'.", param="after")
        items = items[ids.index(after) + 1 :]
    page = items[:limit]
    first, last = (page[0]["id"], page[-1]["id"]) if page else (None, None)
    return 200, {"object": "list", "data": page, "first_id": first, "last_id": last, "has_more": len(items) > limit}


def _limit(raw: str) -> int:
    limit = int(raw) if raw.isascii() and raw.isdecimal() else 0
    if not 1 <= limit <= 100:
        raise InvalidRequest(f"Invalid value for 'limit': '{raw}'; expected an integer from 1 to 100.", param="limit")
    return limit


async def delete(ctx: InfoContext, store: StateStore) -> Reply:
    key = ctx.params["response_id"]
    if not await store.delete(key):
        raise ResponseNotFound(f"No response with id '{key}' found.")
    return 200, {"id": key, "object": "response", "deleted": True}
