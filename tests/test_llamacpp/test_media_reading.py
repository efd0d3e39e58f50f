"""A prompt with images in the scheduler (no model): read a piece a step from where its slot's
cache leaves off, never from inside an image, up to its last run of text, which the batch reads."""

from __future__ import annotations

import pytest

from asgi_llm.engines.llamacpp.batching import Scheduler, Slot
from asgi_llm.engines.llamacpp.jobs import Job, Ticket
from asgi_llm.engines.llamacpp.media_reading import read_media

from .test_batching import Counting, Inbox, Recorder

IMAGE = [-7, -8, -9, -10]  # an image's stand-in ids
PROMPT = [1, 2, *IMAGE, 3, 4, 5]  # text, the image at 2..6, then the last run of text from 6


class Pictures:
    """A `Media` over `PROMPT` that records what it was asked to read."""

    def __init__(self, fail: bool = False) -> None:
        self.tail = 6
        self.reads: list[tuple[int, int]] = []
        self.fail = fail

    def boundary(self, position: int) -> int:
        return 2 if 2 < position < 6 else position

    def read(self, sequence: int, start: int, budget: int) -> int:
        if self.fail:
            raise RuntimeError("the encoder failed")
        self.reads.append((sequence, start))
        return 6 if start == 2 else min(2, start + budget)  # the image whole, or text up to it


def placed(media: Pictures, held: list[int]) -> tuple[Job, Slot]:
    slot = Slot(1, tokens=list(held))
    job = Job(Ticket(Inbox(), choices=1), list(PROMPT), Counting(list(PROMPT), 2), media=media)
    job.slot, slot.job = slot, job
    job.cached, job.pending = len(held), PROMPT[len(held) :]
    return job, slot


def read_all(job: Job, backend: Recorder, budget: int = 16) -> int:
    steps = 0
    while read_media([job], backend, lambda *args: pytest.fail("no read fails here"), budget) is not None:
        steps += 1
    return steps


@pytest.mark.parametrize(("held", "starts"), [([], [0, 2]), ([1, 2], [2]), ([1, 2, -7, -8], [2])])
def test_a_prompt_is_read_up_to_its_last_text_from_where_its_cache_leaves_off(
    held: list[int], starts: list[int]
) -> None:
    backend, media = Recorder(), Pictures()
    job, slot = placed(media, held)
    assert read_all(job, backend) == len(starts)
    assert media.reads == [(1, start) for start in starts]
    assert backend.forgotten == ([(1, 2)] if len(held) > 2 else [])  # never from inside an image
    assert slot.tokens == PROMPT[:6] and job.pending == [3, 4, 5] and job.cached == min(len(held), 2)


def test_text_before_an_image_is_read_a_budget_a_step_and_the_batch_waits_meanwhile() -> None:
    backend, media = Recorder(), Pictures()
    job, slot = placed(media, [])
    assert read_media([job], backend, lambda *args: None, 1) is not None
    assert slot.tokens == [1] and job.pending == []  # nothing for the batch until the images are read
    assert read_all(job, backend, budget=1) == 2  # the second text token, then the image
    assert media.reads == [(1, 0), (1, 1), (1, 2)] and job.pending == [3, 4, 5]


def test_a_cache_that_holds_the_images_reads_nothing() -> None:
    backend, media = Recorder(), Pictures()
    job, _ = placed(media, PROMPT[:7])
    assert read_media([job], backend, lambda *args: None, 16) is None
    assert media.reads == [] and job.pending == [4, 5]


def test_a_read_that_fails_ends_its_job_only() -> None:
    backend, media, failed = Recorder(), Pictures(fail=True), []
    job, _ = placed(media, [])
    assert read_media([job], backend, lambda job, exc, doing: failed.append((job, doing)), 16) is not None
    assert failed == [(job, "reading its images")]


def test_the_scheduler_reads_images_before_the_batch_reads_the_rest() -> None:
    backend, media, inbox = Recorder(), Pictures(), Inbox()
    scheduler = Scheduler(backend, slots=1, batch=16, chunk=16)
    scheduler.submit([Job(Ticket(inbox, choices=1), list(PROMPT), Counting(list(PROMPT), 2), media=media)])
    scheduler.step()  # admitted, the text before the image read; the batch waits
    assert media.reads == [(0, 0)] and backend.batches == []
    scheduler.step()  # the image; then the batch reads the last text
    assert media.reads == [(0, 0), (0, 2)]
    assert [token for token, *_ in backend.batches[0]] == [3, 4, 5]  # no stand-in id is decoded
    assert [position for _, position, *_ in backend.batches[0]] == [6, 7, 8]
    assert scheduler.slots[0].tokens == PROMPT
