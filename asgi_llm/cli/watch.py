"""Hot reload for `asgi-llm serve`: on SIGHUP, and when the config file, the keys file or the
models folder changes (polled by modification time: no dependency, works on every filesystem)."""

from __future__ import annotations

# asyncio only for the watcher's task (a task group would wrap the block's exceptions in an ExceptionGroup)
# and the SIGHUP handler (a loop callback; anyio's signal receiver is an iterator needing a task of its own)
import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

import anyio

from ..support.tasks import cancel_and_wait

__all__ = ["reloading"]

log = logging.getLogger("asgi_llm.reload")


def _stamps(paths: Sequence[str]) -> tuple[float | None, ...]:
    def stamp(path: str) -> float | None:
        try:
            return os.stat(path).st_mtime_ns
        except OSError:
            return None

    return tuple(stamp(p) for p in paths)


@contextlib.asynccontextmanager
async def reloading(
    reload: Callable[[], Awaitable[None]], paths: Callable[[], Sequence[str]], *, interval: float = 1.0
) -> AsyncIterator[None]:
    """Call `reload` on SIGHUP and whenever one of `paths()` changes, while the block runs.
    A failed reload is logged and the server goes on with what it served."""
    loop = asyncio.get_running_loop()
    wake = anyio.Event()  # set by SIGHUP; a fresh one once it is heard

    async def run() -> None:
        nonlocal wake
        watched = list(paths())
        seen = _stamps(watched)
        while True:
            with anyio.move_on_after(interval):
                await wake.wait()
            now = _stamps(watched)
            if not wake.is_set() and now == seen:
                continue
            wake = anyio.Event()
            try:
                await reload()
                log.info("configuration reloaded")
            except Exception as exc:  # noqa: BLE001 - a broken file (any parser's error) must not stop the server
                log.error("reload failed, still serving the previous configuration: %s", exc)
            watched = list(paths())
            seen = _stamps(watched)

    with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):  # no signals off the main thread
        loop.add_signal_handler(signal.SIGHUP, lambda: wake.set())
    task = loop.create_task(run())
    try:
        yield
    finally:
        await cancel_and_wait(task)
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.remove_signal_handler(signal.SIGHUP)
