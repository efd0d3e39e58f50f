"""A load progress bar for `asgi-llm serve` on a terminal, drawn from the pool's health."""

from __future__ import annotations

import asyncio  # only for the bar's task: a task group would wrap the block's exceptions in an ExceptionGroup
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any, TextIO

import anyio

from ..support.tasks import cancel_and_wait

__all__ = ["progress_bar", "render"]

_WIDTH = 30


def render(models: list[dict[str, Any]]) -> str:
    """One line for the models loading now ('' when none is)."""
    parts = []
    for model in models:
        if model.get("state") == "loading":
            fraction = float(model.get("progress") or 0.0)
            filled = int(fraction * _WIDTH)
            parts.append(f"loading {model['id']} [{'#' * filled}{'.' * (_WIDTH - filled)}] {fraction:4.0%}")
    return "  ".join(parts)


@contextlib.asynccontextmanager
async def progress_bar(
    health: Callable[[], tuple[int, dict[str, Any]]], stream: TextIO, *, interval: float = 0.2
) -> AsyncIterator[None]:
    """Redraw the bar on `stream` while the block runs, if `stream` is a terminal."""
    if not stream.isatty():
        yield
        return

    async def draw() -> None:
        shown = ""
        while True:
            line = render(health()[1]["models"])
            if line != shown:
                stream.write("\r\033[K" + line)
                stream.flush()
                shown = line
            await anyio.sleep(interval)

    task = asyncio.get_running_loop().create_task(draw())
    try:
        yield
    finally:
        await cancel_and_wait(task)
