"""Requests that run on after their HTTP call answered: Responses' `background: true`.

The endpoint hands such a request here. It is stored at once as `queued` and answered (or, with
`stream`, its events are sent as they come), then generated in the same ASGI call, so the layers
around it — usage, limits, metrics, tracing — count it as any other request, and a client that
leaves does not stop it. Its status is stored as it moves (`in_progress`, then `completed`,
`incomplete`, `failed` or `cancelled`); its events are kept, in memory while it runs and in the
store (under `{id}#run`, with the process that runs it) once it ends, so a stream can be resumed
from any sequence number. A cancel stops the generation and frees its slot. A process that
starts fails every unfinished run whose process is gone (`recover`): none stays `in_progress`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import anyio

from ..adapters.base import DetachedEncoder, GenerateRoute, Meta, Parsed, StateStore, Streamed
from ..core import InternalError, InvalidRequest, LLMError, PromptRead, Queued, SharedStateStore, Unavailable
from ..core.policy import KeyInfo
from ..http.asgi import Send, send_json, start_stream
from ..http.context import Meter, RequestContext
from ..http.trace_notes import TraceNotes
from ..pool import ModelPool
from .images import check_images

__all__ = ["RUN_SUFFIX", "BackgroundRuns", "OwnedRuns", "send_streamed"]

log = logging.getLogger("asgi_llm.background")

RUN_SUFFIX = "#run"
"""After a response's id: the key of its run (the process running it, its events once ended)."""
_UNFINISHED = ("queued", "in_progress")
_POLL_SECONDS = 0.5
_CANCEL_CHECK_SECONDS = 1.0
_RESTARTED = "The server stopped before this background response finished; create it again."


@dataclass
class _Run:
    owner: str | None
    events: list[dict[str, Any]] = field(default_factory=list)
    final: dict[str, Any] | None = None
    scope: anyio.CancelScope | None = None
    cancel_asked: bool = False
    changed: anyio.Event = field(default_factory=anyio.Event)
    ended: anyio.Event = field(default_factory=anyio.Event)

    def add(self, events: list[dict[str, Any]]) -> None:
        if events:
            self.events.extend(events)
            self.changed.set()
            self.changed = anyio.Event()

    def cancel(self) -> None:
        self.cancel_asked = True
        if self.scope is not None:
            self.scope.cancel()


def _process() -> str:
    """This process, as a run records it: its machine, pid and start time (a pid alone may be reused)."""
    return f"{socket.gethostname()}:{os.getpid()}:{_stat(os.getpid())[1]}"


def _stat(pid: int) -> tuple[str, str]:
    """A process's state letter and start time, from /proc (empty where there is none)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return "", ""
    return fields[0], fields[19]


def _alive(process: str) -> bool:
    """Whether the process a run names still runs: not gone, not a zombie, not a reused pid. One
    on another machine (a shared PostgreSQL store) is taken to run: this one cannot see it."""
    rest = process
    if process.count(":") == 2:  # machine:pid:start (a run recorded before machines were named has none)
        host, _, rest = process.partition(":")
        if host != socket.gethostname():
            return True
    pid, _, started = rest.partition(":")
    try:
        os.kill(int(pid), 0)
    except (OSError, ValueError):
        return False
    state, now = _stat(int(pid))
    return state != "Z" and now == started


class BackgroundRuns:
    """This process's background runs, shared by sibling apps (they share the store too)."""

    def __init__(self, store: StateStore) -> None:
        self._store = store
        self._runs: dict[tuple[str | None, str], _Run] = {}
        self._shared = store if isinstance(store, SharedStateStore) else None
        """Only a store that outlives the process, shared by every process, may hold background runs."""

    def owned_by(self, key: KeyInfo | None, store: StateStore) -> OwnedRuns:
        """The runs `key` may see and stop (its own; without auth, all), `store` being its view."""
        return OwnedRuns(self, None if key is None else key.name, store)

    async def recover(self) -> int:
        """Fails every unfinished run whose process is gone (this one included: it has just
        started); the number failed. A store that cannot be reached is not swept (the next start
        sweeps it), and does not stop the start."""
        if self._shared is None:
            return 0
        try:
            runs = await self._shared.scan(RUN_SUFFIX)
        except LLMError as unreachable:  # the store is away (a 503 for the requests that need it): no sweep now
            log.warning("background responses were not swept at startup: %s", unreachable.message)
            return 0
        ours, failed = _process(), 0
        for key, run in runs:
            process = str(run.get("process", ""))
            if run.get("done") or (process != ours and _alive(process)):
                continue
            response_key = key.removesuffix(RUN_SUFFIX)
            stored = await self._store.get(response_key)
            if stored is not None and stored["response"].get("status") in _UNFINISHED:
                error = {"code": "server_error", "message": _RESTARTED}
                stored["response"] = {**stored["response"], "status": "failed", "error": error}
                await self._store.put(response_key, stored)
                failed += 1
            await self._store.put(key, {**run, "done": True})
        if failed:
            log.warning("%d background responses were failed: the server that ran them stopped", failed)
        return failed

    async def run(
        self,
        pool: ModelPool,
        route: GenerateRoute[Any, Any],
        parsed: Parsed[Any, Any],
        context: RequestContext,
        meter: Meter,
        store: StateStore,
        send: Send,
    ) -> None:
        """Answers at once, then generates until the end or a cancel; never stopped by the client."""
        if route.detached is None or context.in_process is not None:
            raise InvalidRequest("Only a Responses request over HTTP can run in the background.", param="background")
        if self._shared is None:
            message = (
                "'background' needs a state store that outlives the process: state_store = \"sqlite\", or a state_url."
            )
            raise InvalidRequest(message, param="background")
        owner, notes = None if context.key is None else context.key.name, context.trace
        model = pool.resolve(parsed.request.model) or parsed.request.model
        meta = Meta(request_id=uuid.uuid4().hex[:24], created=int(time.time()), model=model, trace=context.request_id)
        encoder = route.detached.encoder(parsed, meta)
        queued = encoder.queue()
        key: str = queued["id"]
        run = self._runs[(owner, key)] = _Run(owner, encoder.kept())
        try:
            await _record(route, parsed, queued, store)
            await store.put(key + RUN_SUFFIX, {"process": _process(), "done": False})
            async with anyio.create_task_group() as group:
                if parsed.stream:
                    group.start_soon(_send_live, send, route, _follow(run, -1))
                else:
                    await send_json(send, 200, queued)
                async with anyio.create_task_group() as watching:
                    watching.start_soon(_watch_cancel, store, key, run)
                    await self._generate(pool, route, parsed, encoder, run, meter, notes, store)
                    watching.cancel_scope.cancel()
        finally:
            del self._runs[(owner, key)]
            run.ended.set()

    async def _generate(
        self,
        pool: ModelPool,
        route: GenerateRoute[Any, Any],
        parsed: Parsed[Any, Any],
        encoder: DetachedEncoder,
        run: _Run,
        meter: Meter,
        notes: TraceNotes | None,
        store: StateStore,
    ) -> None:
        with anyio.CancelScope() as scope:
            run.scope = scope
            if run.cancel_asked:
                scope.cancel()
            try:
                await _generated(pool, route, parsed, encoder, run, meter, notes, store)
            except LLMError as error:
                meter.fail(error.status)
                encoder.error(error)
            except anyio.get_cancelled_exc_class():
                if not scope.cancel_called:  # the server is going down, not a cancel
                    final = encoder.snapshot("failed", Unavailable(_RESTARTED))
                    with anyio.CancelScope(shield=True):
                        await self._end(route, parsed, final, run, store)
                raise
            except Exception:
                log.exception("a background response failed")
                meter.fail(InternalError.status)
                encoder.error(InternalError("The server had an error while generating."))
        final = encoder.snapshot("cancelled") if scope.cancelled_caught else encoder.final()
        run.add(encoder.kept())  # a failure's event
        with anyio.CancelScope(shield=True):
            await self._end(route, parsed, final, run, store)

    async def _end(self, route: Any, parsed: Parsed[Any, Any], final: Any, run: _Run, store: StateStore) -> None:
        """The final object stored with the run's events; followers end after its last event."""
        await _record(route, parsed, final, store)
        await store.put(final["id"] + RUN_SUFFIX, {"process": _process(), "done": True, "events": run.events})
        run.final = final
        run.changed.set()


async def _generated(
    pool: ModelPool,
    route: GenerateRoute[Any, Any],
    parsed: Parsed[Any, Any],
    encoder: DetachedEncoder,
    run: _Run,
    meter: Meter,
    notes: TraceNotes | None,
    store: StateStore,
) -> None:
    """The generation, its events kept as they come; `in_progress` once the model starts on it."""
    async with pool.use(parsed.request.model, keep_alive=parsed.keep_alive) as (engine, model_id):
        meter.serving(model_id)
        check_images(parsed.request, engine, model_id)
        events = engine.generate(parsed.request)
        if notes is not None:
            events = notes.watch(events)
        started = False
        async with contextlib.aclosing(events):
            async for event in events:
                if isinstance(event, Queued):
                    continue
                if not started:
                    started = True
                    await _record(route, parsed, encoder.snapshot("in_progress"), store)
                    encoder.open()
                if not isinstance(event, PromptRead):
                    meter.event(event)
                    encoder.event(event)
                run.add(encoder.kept())
        if not started:
            encoder.open()
        encoder.close()
        run.add(encoder.kept())


async def _record(route: GenerateRoute[Any, Any], parsed: Parsed[Any, Any], response: Any, store: StateStore) -> None:
    if route.record is not None:
        await route.record(parsed, response, store)


async def _watch_cancel(store: StateStore, key: str, run: _Run) -> None:
    """A cancel asked of another worker sharing the store: seen within a second."""
    while run.final is None:
        await anyio.sleep(_CANCEL_CHECK_SECONDS)
        stored = await store.get(key + RUN_SUFFIX)
        if stored is not None and stored.get("cancel") and run.final is None:
            run.cancel()
            return


async def _follow(run: _Run, after: int) -> AsyncGenerator[dict[str, Any], None]:
    """The run's events above `after`: those kept, then each as it comes, until it has ended."""
    sent = 0
    while True:
        changed = run.changed
        for event in run.events[sent:]:
            if event["sequence_number"] > after:
                yield event
        sent = len(run.events)
        if run.final is not None and sent == len(run.events):
            return
        await changed.wait()


async def _send_live(send: Send, route: GenerateRoute[Any, Any], events: AsyncIterator[dict[str, Any]]) -> None:
    """A background stream to the client that made it; if the client leaves, the run goes on."""
    assert route.detached is not None
    frames = route.detached.frames
    try:
        await start_stream(send, route.detached.media_type)
        async for event in events:
            await send({"type": "http.response.body", "body": frames([event]), "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
    except Exception:  # noqa: BLE001 (the client left: its run is not its connection)
        log.debug("a background stream's client left; the response goes on")


async def send_streamed(send: Send, reply: Streamed) -> None:
    """A state route's stream (a background response followed) to its client."""
    await start_stream(send, reply.media_type)
    async for chunk in reply.chunks:
        await send({"type": "http.response.body", "body": chunk, "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})


class OwnedRuns:
    """The runs one caller (an API key, or everyone without auth) may see and stop."""

    def __init__(self, runs: BackgroundRuns, owner: str | None, store: StateStore) -> None:
        self._runs, self._owner, self._store = runs, owner, store

    async def cancel(self, key: str) -> dict[str, Any] | None:
        run = self._runs._runs.get((self._owner, key))
        if run is not None:
            run.cancel()
            await run.ended.wait()
            return run.final
        stored = await self._store.get(key)
        if stored is None or stored["response"].get("status") not in _UNFINISHED:
            return None
        marker = await self._store.get(key + RUN_SUFFIX) or {}
        await self._store.put(key + RUN_SUFFIX, {**marker, "cancel": True})  # its worker stops within a second
        return {**stored["response"], "status": "cancelled"}

    def follow(self, key: str, after: int) -> AsyncIterator[dict[str, Any]]:
        run = self._runs._runs.get((self._owner, key))
        return _follow(run, after) if run is not None else self._polled(key, after)

    async def _polled(self, key: str, after: int) -> AsyncGenerator[dict[str, Any], None]:
        """A run of another worker, or one that has ended: its events once it has ended."""
        while True:
            stored = await self._store.get(key)
            if stored is None or stored["response"].get("status") not in _UNFINISHED:
                break
            await anyio.sleep(_POLL_SECONDS)
        marker = await self._store.get(key + RUN_SUFFIX) or {}
        for event in marker.get("events", ()):
            if event["sequence_number"] > after:
                yield event
