"""A prompt with images, read before the batch reads the rest: from where its slot's cache leaves
off (never inside an image: an image is read whole) up to its last run of text, a piece a step on
the inference thread, beside the running choices' decodes: one image (through the projector's
encoder, projector.py) or a prefill chunk of text at a time, for the first such job in arrival
order. Meanwhile it has no pending tokens, so the batch leaves it be; once its slot holds the
prompt up to its last run of text (the template's turn header at least), that goes through the
batch as any prompt's, and the job samples from its logits as any other.

Pure: the job's `Media` does the reading; this module only keeps the slot's token list and the
job's pending tokens in step with it. A read that fails ends its job's request (the slot is
emptied by the scheduler, since what it holds is unknown), and the others go on.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from .jobs import Backend, Job

__all__ = ["read_media"]


def read_media(
    active: list[Job], backend: Backend, fail: Callable[[Job, Exception, str], None], budget: int
) -> float | None:
    """Read one piece of the first running job whose slot holds less of its prompt than where its
    last run of text begins (one just admitted, one partly read, or one whose cache a failed
    decode lost): an image, or up to `budget` tokens of text. When it read (`time.monotonic`), or
    None when no job had a piece to read."""
    unread = [j for j in active if _unread(j)]
    for job in unread:
        job.pending = []  # the batch leaves it be until its images are read
    if not unread:
        return None
    job = unread[0]
    slot, media = job.slot, job.media
    assert slot is not None and media is not None
    start = media.boundary(len(slot.tokens))
    try:
        if start < len(slot.tokens):
            backend.forget(slot.sequence, start)
            del slot.tokens[start:]
        end = media.read(slot.sequence, start, budget)
    except Exception as exc:  # noqa: BLE001 (one fault, one request: it ends this job only)
        fail(job, exc, "reading its images")
        return time.monotonic()
    slot.tokens.extend(job.prompt[start:end])
    job.cached = min(job.cached, start)
    job.pending = job.prompt[media.tail :] if end >= media.tail else []  # the batch's part, once it is next
    return time.monotonic()


def _unread(job: Job) -> bool:
    media, slot = job.media, job.slot
    return media is not None and slot is not None and job.leader is None and len(slot.tokens) < media.tail
