"""`tasks.spawn`: a failure nothing awaits is logged once; a cancellation is no failure, and a task
whose awaiter takes its failure (log=None) is not logged here. And no module starts such a task
any other way."""

from __future__ import annotations

import ast
import asyncio
import logging
from pathlib import Path

import pytest

from asgi_llm.support import tasks

ROOT = Path(__file__).resolve().parents[2]
HELD_BY_THEIR_BLOCK = {"asgi_llm/cli/progress.py", "asgi_llm/cli/watch.py"}  # a `with` block cancels its task on the way out
log = logging.getLogger("asgi_llm.pool")
pytestmark = pytest.mark.anyio


async def test_a_failure_nothing_awaits_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    async def work() -> None:
        await asyncio.sleep(0.01)
        raise RuntimeError("boom")

    with caplog.at_level(logging.ERROR, logger="asgi_llm.pool"):
        task = tasks.spawn(work(), name="unheld", log=log)
        await asyncio.wait([task], timeout=2)
        await asyncio.sleep(0)
    assert task.done() and task.get_name() == "unheld"
    failures = [r for r in caplog.records if "unheld" in r.getMessage()]
    assert len(failures) == 1 and failures[0].exc_info is not None and "boom" in str(failures[0].exc_info[1])


async def test_a_cancellation_and_an_awaited_failure_are_not_logged(caplog: pytest.LogCaptureFixture) -> None:
    async def forever() -> None:
        await asyncio.sleep(60)

    async def fails() -> None:
        raise ValueError("taken by the awaiter")

    with caplog.at_level(logging.ERROR, logger="asgi_llm.pool"):
        waiting = tasks.spawn(forever(), name="cancelled", log=log)
        await asyncio.sleep(0)
        waiting.cancel()
        awaited = tasks.spawn(fails(), name="awaited", log=None)
        with pytest.raises(ValueError, match="awaiter"):
            await awaited
        with pytest.raises(asyncio.CancelledError):
            await waiting
        await asyncio.sleep(0)
    assert not [r for r in caplog.records if r.name == "asgi_llm.pool"]


def test_no_module_starts_a_lasting_task_but_through_spawn() -> None:
    found = []
    for source in (ROOT / "asgi_llm", ROOT / "adapters", ROOT / "contrib"):
        for path in sorted(source.rglob("*.py")):
            name = str(path.relative_to(ROOT))
            if name in HELD_BY_THEIR_BLOCK or name == "asgi_llm/support/tasks.py":
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                call = node.func if isinstance(node, ast.Call) else None
                if isinstance(call, ast.Attribute) and call.attr in ("create_task", "ensure_future"):
                    found.append(f"{name}:{node.lineno}")
    assert not found, f"tasks started without tasks.spawn: {found}"
