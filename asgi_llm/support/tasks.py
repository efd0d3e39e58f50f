"""Tasks the package starts on the running loop that outlive the call starting them: named, and a
failure logged where nothing awaits it, rather than lost. The caller keeps the task (the loop holds
tasks only weakly), as the object it belongs to. Imports nothing of ours."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["cancel_and_wait", "spawn"]

T = TypeVar("T")


def spawn(work: Coroutine[Any, Any, T], *, name: str, log: logging.Logger | None) -> asyncio.Task[T]:
    """`work` as a task on the running loop, named `name`, for the caller to keep. `log` gets its
    failure (a cancellation is no failure); None where whoever awaits the task takes its failure."""
    task = asyncio.get_running_loop().create_task(work, name=name)
    task.add_done_callback(lambda done: _ended(done, log))
    return task


def _ended(task: asyncio.Task[Any], log: logging.Logger | None) -> None:
    if log is None or task.cancelled():
        return
    failure = task.exception()
    if failure is not None:
        log.error("the background task %s failed", task.get_name(), exc_info=failure)


async def cancel_and_wait(task: asyncio.Task[Any]) -> None:
    """Cancel `task` and wait until it has ended. Its own cancellation stays here; its failure is
    the caller's. A cancel of the caller while it waits ends the caller: `suppress(CancelledError)`
    around `await task` would swallow that one too, and a server going down would find its
    shutdown task running on as if never asked to stop."""
    task.cancel()
    await asyncio.wait({task})
    if not task.cancelled():
        task.result()
