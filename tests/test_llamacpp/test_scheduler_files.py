"""The scheduler with saved prompts on disk, over the backend that keeps every sequence's cache as
llama.cpp does: a prompt read afresh is saved once it is read, and after a restart (a new
scheduler, model and file index over the same directory) the next prompt sharing it starts from
the file, holding exactly what the first run read."""

from __future__ import annotations

from pathlib import Path

from asgi_llm.engines.llamacpp.batching import Scheduler
from asgi_llm.engines.llamacpp.cache_reading import COPY_GAIN
from asgi_llm.engines.llamacpp.jobs import END, Job
from asgi_llm.engines.llamacpp.prompt_cache import PromptCache
from asgi_llm.engines.llamacpp.prompt_files import FILE_GAIN, PromptFiles

from .sequence_model import ByteStates, Request, Scripted

SYSTEM = list(range(2000, 2000 + FILE_GAIN + 40))


def run(root: Path, model: ByteStates, prompt: list[int], *, cache: bool = True) -> tuple[Job, PromptFiles]:
    files = PromptFiles(root, 1 << 20, bytes(32), pending=1 << 20)
    scheduler = Scheduler(
        model, slots=2, batch=64, chunk=32, cache=PromptCache(1 << 20) if cache else None, files=files
    )
    request = Request(1)
    job = Job(request.ticket, prompt, Scripted(model, prompt, 3, 50_000))
    scheduler.submit([job])
    while END not in request.items:
        scheduler.step()
        assert scheduler.violations() == [] and scheduler.faults == 0
    files.close()  # the queued write lands, as at an unload
    return job, files


def test_a_prompt_read_afresh_is_saved_and_read_from_disk_after_a_restart(tmp_path: Path) -> None:
    first, files = run(tmp_path, ByteStates(2), [*SYSTEM, 1, 2, 3])
    assert first.cached == 0 and files.stats()["writes"] == 1
    model = ByteStates(2)
    second, files = run(tmp_path, model, [*SYSTEM, 7, 8], cache=False)
    assert model.restored == 1 and files.stats()["reads"] == 1
    assert second.cached == len(SYSTEM)  # the file held the first prompt: the shared part is kept
    assert model.holds(0)[: len(SYSTEM) + 2] == [*SYSTEM, 7, 8] or model.holds(1)[: len(SYSTEM) + 2] == [*SYSTEM, 7, 8]
    assert files.stats()["writes"] == 0  # it read too few tokens afresh to be saved again


def test_a_short_prompt_is_not_saved(tmp_path: Path) -> None:
    _, files = run(tmp_path, ByteStates(2), list(range(FILE_GAIN - 1)))
    assert files.stats()["writes"] == 0 and files.stats()["files"] == 0


def test_a_file_that_gains_less_than_a_copy_is_not_read(tmp_path: Path) -> None:
    run(tmp_path, ByteStates(2), [*SYSTEM, 1])
    model = ByteStates(2)
    job, files = run(tmp_path, model, SYSTEM[: COPY_GAIN - 1] + [9, 9])
    assert files.stats()["reads"] == 0 and model.restored == 0 and job.cached == 0


def test_a_state_llama_cpp_refuses_is_read_afresh_and_its_file_discarded(tmp_path: Path) -> None:
    run(tmp_path, ByteStates(2), [*SYSTEM, 1])
    model = ByteStates(2, refuse=True)
    job, files = run(tmp_path, model, [*SYSTEM, 5])
    assert job.cached == 0 and files.stats()["reads"] == 1
    assert files.stats()["writes"] == 1  # read afresh, it is saved anew (the refused file was removed)
    assert len(list(files.directory.iterdir())) == 1


class Failing(ByteStates):
    """A restore that raises (llama.cpp's call failing under it), once."""

    def restore(self, sequence: int, state: object) -> bool:
        if not getattr(self, "failed", False):
            self.failed = True
            raise RuntimeError("restore failed")
        return super().restore(sequence, state)


def test_a_restore_from_a_file_that_raises_ends_that_request_only(tmp_path: Path) -> None:
    run(tmp_path, ByteStates(2), [*SYSTEM, 1])
    model = Failing(2)
    files = PromptFiles(tmp_path, 1 << 20, bytes(32), pending=1 << 20)
    scheduler = Scheduler(model, slots=2, batch=64, chunk=32, cache=None, files=files)
    first, second = Request(1), Request(1)
    for request, tail in ((first, [5]), (second, [6])):
        prompt = [*SYSTEM, *tail]
        scheduler.submit([Job(request.ticket, prompt, Scripted(model, prompt, 3, 50_000 + tail[0]))])
    for _ in range(200):
        if END in first.items and END in second.items:
            break
        scheduler.step()
    files.close()
    assert scheduler.faults == 1 and not scheduler.broken and scheduler.violations() == []
    assert any(isinstance(item, Exception) for item in first.items)  # the one whose restore raised
    assert model.restored == 1 and not any(isinstance(item, Exception) for item in second.items)
