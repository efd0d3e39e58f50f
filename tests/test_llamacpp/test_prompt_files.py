"""Saved prompts on disk: kept across instances (a restart), found by the longest shared prefix of
one adapter setting, within a byte budget by least recent use, written atomically, and never read
back when a file is not exactly what it says."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest

from asgi_llm.engines.llamacpp import prompt_files
from asgi_llm.engines.llamacpp.prompt_files import PromptFiles, fingerprint

DIGEST = bytes(range(32))
OTHER = bytes(range(1, 33))


def state(n: int, fill: int = 7) -> np.ndarray:
    return np.full(n, fill, dtype=np.uint8)


def files(root: Path, budget: int = 1 << 20, digest: bytes = DIGEST, pending: int = 1 << 20) -> PromptFiles:
    return PromptFiles(root, budget, digest, pending=pending)


def written(root: Path, *saves: tuple[list[int], np.ndarray], setting: tuple[float, ...] = ()) -> PromptFiles:
    """Saves written by one instance, and a fresh instance over the same directory (a restart)."""
    first = files(root)
    for tokens, data in saves:
        assert first.write(tokens, setting, data)
    first.close()
    return files(root)


def test_a_prompt_saved_before_a_restart_is_found_and_read_back_exactly(tmp_path: Path) -> None:
    after = written(tmp_path, ([1, 2, 3, 4], state(100, 3)))
    stored, length = after.best([1, 2, 3, 9], ())
    assert stored is not None and length == 3 and stored.tokens == [1, 2, 3, 4]
    data = after.read(stored)
    assert data is not None and data.tobytes() == bytes([3]) * 100
    assert after.stats()["reads"] == 1 and after.stats()["files"] == 1
    assert after.best([5, 6], ()) == (None, 0)
    after.close()


def test_prompts_of_another_adapter_setting_are_not_offered(tmp_path: Path) -> None:
    after = written(tmp_path, ([1, 2, 3], state(10)), setting=(0.5,))
    assert after.best([1, 2, 3], ())[0] is None
    assert after.best([1, 2, 3], (0.5,))[1] == 3
    assert after.holds([1, 2], (0.5,)) and not after.holds([1, 2], ())
    after.close()


def test_another_model_or_context_finds_nothing_and_a_foreign_file_is_refused(tmp_path: Path) -> None:
    after = written(tmp_path, ([1, 2, 3], state(10)))
    other = files(tmp_path, digest=OTHER)
    assert other.best([1, 2, 3], ()) == (None, 0)
    (name,) = os.listdir(after.directory)
    stray = other.directory / name  # a file of the first fingerprint, in the second's directory
    stray.write_bytes((after.directory / name).read_bytes())
    os.utime(other.directory, None)
    other._scanned = -1
    assert other.best([1, 2, 3], ()) == (None, 0) and not stray.exists()
    after.close()
    other.close()


def test_a_crash_mid_write_leaves_nothing_that_is_read_back(tmp_path: Path) -> None:
    after = written(tmp_path, ([1, 2, 3], state(64)))
    (name,) = os.listdir(after.directory)
    whole = (after.directory / name).read_bytes()
    after.close()
    half = tmp_path / "half"
    fresh = files(half)
    # a writer that died before its rename, and a file cut short under a real name
    (fresh.directory / f".{name}.1.2.tmp").write_bytes(whole[: len(whole) // 2])
    (fresh.directory / name).write_bytes(whole[:-1])
    fresh._scanned = -1
    assert fresh.best([1, 2, 3], ()) == (None, 0)
    assert os.listdir(fresh.directory) == [f".{name}.1.2.tmp"]  # the cut file is removed
    old = time.time() - prompt_files.STALE_TEMPORARY - 1
    os.utime(fresh.directory / f".{name}.1.2.tmp", (old, old))
    fresh._scanned = -1
    fresh.best([1], ())
    assert os.listdir(fresh.directory) == []  # a crashed writer's file is cleared once stale
    fresh.close()


def test_a_file_that_changed_under_the_index_is_compared_exactly_and_not_used(tmp_path: Path) -> None:
    after = written(tmp_path, ([1, 2, 3, 4], state(50)))
    stored, _ = after.best([1, 2, 3, 4], ())
    assert stored is not None
    stored.tokens = [1, 2, 3, 5]  # what the index chose it for is no longer what the file holds
    assert after.read(stored) is None
    assert after.best([1, 2, 3, 4], ()) == (None, 0) and not stored.path.exists()
    after.close()


def test_a_file_another_process_removed_is_a_miss(tmp_path: Path) -> None:
    after = written(tmp_path, ([1, 2, 3], state(10)))
    stored, _ = after.best([1, 2, 3], ())
    assert stored is not None
    stored.path.unlink()
    assert after.read(stored) is None and after.best([1, 2, 3], ())[0] is None
    after.close()


def test_the_least_recently_used_file_goes_first_to_stay_within_the_budget(tmp_path: Path) -> None:
    one = files(tmp_path, budget=3 * 1100)
    for n in range(3):
        assert one.write([n, n, n], (), state(1000, n))
    one.close()
    two = files(tmp_path, budget=3 * 1100)
    first, _ = two.best([0, 0, 0], ())
    assert first is not None and two.read(first) is not None  # now the most recently used
    two.close()
    time.sleep(0.01)
    three = files(tmp_path, budget=3 * 1100)
    assert three.write([3, 3, 3], (), state(1000, 3))
    three.close()
    four = files(tmp_path, budget=3 * 1100)
    kept = {tuple(s.tokens) for s in four._index.values()}
    assert kept == {(0, 0, 0), (2, 2, 2), (3, 3, 3)}, kept
    assert four.stats()["bytes"] <= four.budget
    four.close()


def test_a_prompt_that_a_new_one_extends_is_replaced_by_it(tmp_path: Path) -> None:
    after = written(tmp_path, ([1, 2, 3], state(10)), ([1, 2, 3, 4, 5], state(20)))
    assert [s.tokens for s in after._index.values()] == [[1, 2, 3, 4, 5]]
    assert after.holds([1, 2, 3], ()) and not after.holds([1, 2, 3, 4, 5, 6], ())
    after.close()


def test_writes_beyond_the_pending_bound_or_the_budget_are_dropped_not_queued(tmp_path: Path) -> None:
    small = files(tmp_path, budget=100, pending=150)
    assert not small.write([1], (), state(101))  # over the budget alone
    small._pending = 100  # as if a write of 100 bytes were still queued
    assert not small.write([2], (), state(60))
    assert small.stats()["dropped"] == 2
    small._pending = 0
    small.close()


def test_two_processes_sharing_a_directory_see_each_others_prompts(tmp_path: Path) -> None:
    a, b = files(tmp_path), files(tmp_path)
    assert a.write([9, 8, 7], (), state(30))
    a.close()
    stored, length = b.best([9, 8, 7, 6], ())
    assert stored is not None and length == 3 and b.read(stored) is not None
    b.close()


@pytest.mark.parametrize("change", ["contents", "parts"])
def test_the_fingerprint_changes_with_the_model_file_and_the_context(tmp_path: Path, change: str) -> None:
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF" + bytes(3 << 20))
    parts = {"n_ctx": 4096, "type_k": None}
    before = fingerprint(str(model), parts)
    assert fingerprint(str(model), dict(reversed(parts.items()))) == before  # order does not matter
    if change == "contents":
        stat = model.stat()
        model.write_bytes(b"GGUF" + bytes(3 << 20 - 1) + b"\x01")  # same size; last MiB differs
        os.utime(model, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    else:
        parts["n_ctx"] = 2048
    assert fingerprint(str(model), parts) != before
