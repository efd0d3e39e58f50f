"""Stored-response state: bounded by count and age, and SQLite shared across processes and restarts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from asgi_llm.storage.state import MemoryStore, SQLiteStore

pytestmark = pytest.mark.anyio


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=["memory", "sqlite"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path):  # type: ignore[no-untyped-def]
    def make(clock: Clock, max_items: int = 3, max_age: float = 60):  # type: ignore[no-untyped-def]
        if request.param == "memory":
            return MemoryStore(max_items=max_items, max_age_seconds=max_age, clock=clock)
        return SQLiteStore(str(tmp_path / "state.sqlite3"), max_items=max_items, max_age_seconds=max_age, clock=clock)

    return make


async def test_put_get_delete(make_store) -> None:  # type: ignore[no-untyped-def]
    store = make_store(Clock())
    await store.put("resp_1", {"a": [1, 2], "b": None})
    assert await store.get("resp_1") == {"a": [1, 2], "b": None}
    copy = await store.get("resp_1")
    copy["a"].append(3)
    assert await store.get("resp_1") == {"a": [1, 2], "b": None}
    assert await store.delete("resp_1") is True
    assert await store.delete("resp_1") is False
    assert await store.get("resp_1") is None


async def test_oldest_are_dropped_beyond_max_items(make_store) -> None:  # type: ignore[no-untyped-def]
    clock = Clock()
    store = make_store(clock, max_items=3)
    for i in range(5):
        clock.now += 1
        await store.put(f"k{i}", {"i": i})
    assert [await store.get(f"k{i}") for i in range(5)] == [None, None, {"i": 2}, {"i": 3}, {"i": 4}]


async def test_entries_expire_after_max_age(make_store) -> None:  # type: ignore[no-untyped-def]
    clock = Clock()
    store = make_store(clock, max_age=60)
    await store.put("k", {"v": 1})
    clock.now += 59
    assert await store.get("k") == {"v": 1}
    clock.now += 2
    assert await store.get("k") is None


async def test_sqlite_survives_a_restart(tmp_path: Path) -> None:
    path = str(tmp_path / "s.sqlite3")
    await SQLiteStore(path).put("resp_x", {"output": "kept"})
    assert await SQLiteStore(path).get("resp_x") == {"output": "kept"}


WRITER = """
import sys, anyio
from asgi_llm.storage.state import SQLiteStore

async def write():
    store = SQLiteStore(sys.argv[1])
    for i in range(50):
        await store.put(f"w{sys.argv[2]}-{i}", {"worker": int(sys.argv[2]), "i": i})

anyio.run(write)
"""


@pytest.mark.slow  # it starts writer processes
async def test_sqlite_is_safe_under_concurrent_writer_processes(tmp_path: Path) -> None:
    path = str(tmp_path / "shared.sqlite3")
    SQLiteStore(path)  # create the schema once
    workers = [
        subprocess.Popen([sys.executable, "-c", WRITER, path, str(w)])  # noqa: ASYNC220 (other processes, by design)
        for w in range(3)
    ]
    assert [process.wait(60) for process in workers] == [0, 0, 0]
    store = SQLiteStore(path)
    for w in range(3):
        assert await store.get(f"w{w}-49") == {"worker": w, "i": 49}
