"""A prompt with images, read before the batch reads the rest: from where its slot's cache leaves
off (never inside an image: an image is read whole) up to its last run of text, at once, as one
blocking step on the inference thread, like a large prompt chunk; the projector encodes each
image not already in the cache (projector.py). The last run of text (the template's turn header
at least) then goes through the batch beside the running choices, whose logits the job samples
from as any other.

Pure: the job's `Media` does the reading; this module only keeps the slot's token list and the
job's pending tokens in step with it. A read that fails ends its job's request (the slot is
emptied by the scheduler, since what it holds is unknown), and the others go on.
"""

from __future__ import annotations

from collections.abc import Callable

from .jobs import Backend, Job

__all__ = ["read_media"]


def read_media(active: list[Job], backend: Backend, fail: Callable[[Job, Exception, str], None]) -> bool:
    """Read the images of every running job whose slot holds less of its prompt than where its
    last run of text begins (one just admitted, or one whose cache a failed decode lost). True
    when any was read."""
    read = False
    for job in [j for j in active if _unread(j)]:
        slot, media = job.slot, job.media
        assert slot is not None and media is not None
        start = media.boundary(len(slot.tokens))
        try:
            if start < len(slot.tokens):
                backend.forget(slot.sequence, start)
                del slot.tokens[start:]
            media.read(slot.sequence, start)
        except Exception as exc:  # noqa: BLE001 (one fault, one request: it ends this job only)
            fail(job, exc, "reading its images")
            continue
        slot.tokens.extend(job.prompt[start : media.tail])
        job.cached = min(job.cached, start)
        job.pending = job.prompt[media.tail :]
        read = True
    return read


def _unread(job: Job) -> bool:
    media, slot = job.media, job.slot
    return media is not None and slot is not None and job.leader is None and len(slot.tokens) < media.tail
