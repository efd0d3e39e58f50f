"""`tasks.spawn`: a failure nothing awaits is logged once; a cancellation is no failure, and a task
whose awaiter takes its failure (log=None) is not logged here. And no module starts such a task
any other way. `tasks.cancel_and_wait`: the task ends, its failure is the caller's, and a cancel of the
caller while it waits is not swallowed."""

from __future__ import annotations

import ast
import asyncio
import logging
from pathlib import Path

import pytest

from asgi_llm.support import tasks

ROOT = Path(__file__).resolve().parents[2]
HELD_BY_THEIR_BLOCK = {
    "asgi_llm/cli/progress.py",
    "asgi_llm/cli/watch.py",
}  # a `with` block cancels its task on the way out
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


async def test_cancel_and_wait_ends_the_task_and_hands_on_its_failure() -> None:
    ended = asyncio.Event()

    async def forever() -> None:
        try:
            await asyncio.sleep(60)
        finally:
            ended.set()

    async def fails_on_cancel() -> None:
        try:
            await asyncio.sleep(60)
        finally:
            raise ValueError("failed while ending")

    waiting = tasks.spawn(forever(), name="stopped", log=None)
    await asyncio.sleep(0)
    await tasks.cancel_and_wait(waiting)
    assert ended.is_set() and waiting.cancelled()
    failing = tasks.spawn(fails_on_cancel(), name="failing", log=None)
    await asyncio.sleep(0)
    with pytest.raises(ValueError, match="while ending"):
        await tasks.cancel_and_wait(failing)


async def test_a_cancel_of_the_caller_while_it_stops_a_task_is_not_swallowed() -> None:
    """The task takes a while to end (its own cleanup); the caller is cancelled meanwhile, as a
    server going down cancels its shutdown. `suppress(CancelledError)` around `await task` ran on."""
    release = asyncio.Event()
    after = []

    async def slow_to_end() -> None:
        try:
            await asyncio.sleep(60)
        finally:
            await release.wait()

    async def caller(task: asyncio.Task[None]) -> None:
        await tasks.cancel_and_wait(task)
        after.append("ran on")

    slow = tasks.spawn(slow_to_end(), name="slow", log=None)
    await asyncio.sleep(0)
    stopping = tasks.spawn(caller(slow), name="caller", log=None)
    await asyncio.sleep(0)
    stopping.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stopping
    assert not after and not slow.done()
    release.set()
    await asyncio.wait([slow], timeout=2)
    assert slow.cancelled()


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
