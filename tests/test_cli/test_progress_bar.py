"""The serve progress bar: drawn only on a terminal, from the pool's health."""

from __future__ import annotations

import asyncio
import io
from typing import Any

import pytest

from asgi_llm.cli.progress import progress_bar, render

pytestmark = pytest.mark.anyio


def test_render_draws_each_loading_model() -> None:
    line = render([{"id": "a", "state": "loading", "progress": 0.5}, {"id": "b", "state": "ready"}])
    assert line == "loading a [" + "#" * 15 + "." * 15 + "]  50%"
    assert render([{"id": "b", "state": "ready"}]) == ""


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


async def test_the_bar_is_drawn_on_a_terminal_only() -> None:
    models: list[dict[str, Any]] = [{"id": "a", "state": "loading", "progress": 0.25}]

    def health() -> tuple[int, dict[str, Any]]:
        return 503, {"models": models}

    terminal, pipe = Terminal(), io.StringIO()
    async with progress_bar(health, terminal, interval=0.01), progress_bar(health, pipe, interval=0.01):
        await asyncio.sleep(0.03)
        models[0] = {"id": "a", "state": "ready"}
        await asyncio.sleep(0.03)
    assert "loading a [#######" in terminal.getvalue() and terminal.getvalue().endswith("\r\033[K")
    assert pipe.getvalue() == ""
