"""Where a job's prompt starts from: its slot's own cache, another slot's (copied), or a saved
prompt (restored from memory, or from a file), whichever holds `COPY_GAIN` tokens more of it;
what the slot held is set aside in the `PromptCache` first when that is worth keeping. A prompt
that took enough fresh tokens to read (`PromptFiles.fresh`) is saved to the `PromptFiles` as soon as it is
read, for the next process, load or reload.

A saved prompt chosen to be restored is never dropped before the restore: the save that sets
the slot's old cache aside is told to `keep` it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from .jobs import Backend, Job
from .prompt_cache import PromptCache, SavedPrompt, common_prefix
from .prompt_files import PromptFiles, StoredPrompt

if TYPE_CHECKING:
    from .batching import Slot

__all__ = ["COPY_GAIN", "CacheReader"]

log = logging.getLogger("asgi_llm.engine")

COPY_GAIN = 16
"""Prompt tokens another slot or a saved prompt must hold beyond the new job's own slot to be
copied or restored there, and the fewest a replaced cache must lose to be saved. A copy takes
the whole sequence's cache (llama.cpp copies separate KV streams whole): on 2 cores, SmolLM2-135M,
5 ms at 1024 positions and 15 at 4096, against 3.5 ms a prompt token; a save or a restore
about 0.6 ms per 300 tokens."""


class CacheReader:
    """The cache side of admission, over the scheduler's slots (run on the inference thread)."""

    def __init__(
        self, backend: Backend, slots: list[Slot], cache: PromptCache | None, files: PromptFiles | None = None
    ) -> None:
        self._backend = backend
        self._slots = slots
        self._cache = cache
        self._files = files
        self._copies: dict[int, Slot] = {}  # target sequence → its slot, for copies not yet moved
        self._sources: set[int] = set()  # sequences copied from since the last decode

    def read(self, job: Job) -> None:
        """Keep the slot's longest cached prefix of the prompt (all but its last token, whose
        logits are needed), or take another slot's or a saved one where that is `COPY_GAIN`
        tokens longer; the rest is to be decoded. What the slot held beyond is saved first."""
        slot = job.slot
        assert slot is not None
        usable = len(job.prompt) - 1
        cached = min(common_prefix(slot.tokens, job.prompt), usable)
        donor, saved, better, stored = self._source(job, slot, cached)
        if min(better, usable) - cached >= COPY_GAIN:
            if saved is not None:
                self._restore(slot, saved, stored)
            elif donor is not None:
                self._set_aside(slot, kept=0)
                self._copy(donor, slot)
            cached = min(common_prefix(slot.tokens, job.prompt), usable)
        else:
            self._set_aside(slot, kept=cached)
        if cached < len(slot.tokens):
            self._backend.forget(slot.sequence, cached)
            del slot.tokens[cached:]
        job.cached = cached
        job.pending = job.prompt[cached:]

    def prompt_read(self, job: Job) -> None:
        """The job's whole prompt is in its slot now: save it to a file when it took `files.fresh`
        tokens or more to read afresh and no file holds it already. The state is copied here; the file is
        written on the files' own thread. A fault costs the file only, never the job."""
        files, slot = self._files, job.slot
        if files is None or slot is None or len(job.prompt) - job.cached < files.fresh:
            return
        try:
            if files.holds(slot.tokens, job.setting):
                return
            saved = self._backend.save(slot.sequence, files.budget)
            if saved is not None:
                files.write(slot.tokens, job.setting, saved[0])
        except Exception as exc:  # noqa: BLE001 (a prompt not saved is read again next time, no more)
            log.warning("sequence %s: its prompt could not be saved: %r", slot.sequence, exc)

    def copy_reading(self, leader: Job, follower: Job) -> None:
        """A choice of the same prompt takes a copy of what its leader read."""
        assert leader.slot is not None and follower.slot is not None
        self._set_aside(follower.slot, kept=0)
        self._copy(leader.slot, follower.slot)
        follower.cached = leader.cached
        follower.logits = leader.logits

    def decoded(self) -> None:
        """llama.cpp moved the pending copies at the start of the decode just made."""
        self._copies.clear()
        self._sources.clear()

    def copies_lost(self) -> None:
        """A decode failed, so the copies it was to move may not have moved: the slots they
        were for are emptied, and their jobs read their prompts afresh."""
        for slot in self._copies.values():
            slot.tokens = []
            self._backend.forget(slot.sequence, 0)
            if slot.job is not None:
                slot.job.cached = 0
                slot.job.pending = list(slot.job.prompt)

    def _copy(self, source: Slot, target: Slot) -> None:
        self._backend.copy(source.sequence, target.sequence)
        self._sources.add(source.sequence)
        self._copies[target.sequence] = target
        target.tokens = list(source.tokens)

    def _restore(self, slot: Slot, saved: SavedPrompt, stored: StoredPrompt | None) -> None:
        """Put `saved` into the slot; `stored` is the file it was read from, if it was."""
        if self._cache is not None:
            self._cache.used(saved)  # (nothing, for a state read from a file)
        self._set_aside(slot, kept=0, keep=saved)
        restored = self._backend.restore(slot.sequence, saved.state)
        slot.tokens = list(saved.tokens) if restored else []
        if not restored and stored is not None and self._files is not None:  # refused: not worth reading again
            self._files.discard(stored)

    def _source(
        self, job: Job, slot: Slot, cached: int
    ) -> tuple[Slot | None, SavedPrompt | None, int, StoredPrompt | None]:
        """The other slot or the saved prompt (in memory, or in a file read only when it is worth
        it over the `cached` tokens the slot holds) that holds the longest prefix of the job's
        prompt, that length, and the file a saved prompt was read from. A saved state is written into the slot at once, so not into a
        slot whose cache a pending copy is still to read, or is still to overwrite."""
        donor = max(
            (s for s in self._slots if s is not slot), key=lambda s: common_prefix(s.tokens, job.prompt), default=None
        )
        held = common_prefix(donor.tokens, job.prompt) if donor is not None else 0
        if slot.sequence in self._sources or slot.sequence in self._copies:
            return donor, None, held, None
        saved, length = self._cache.best(job.prompt) if self._cache is not None else (None, 0)
        if saved is None or length <= held:
            saved, length = None, held
        if self._files is not None:
            stored, on_file = self._files.best(job.prompt, job.setting)
            if stored is not None and on_file > length and min(on_file, len(job.prompt) - 1) - cached >= COPY_GAIN:
                state = self._files.read(stored)
                if state is not None:
                    return None, SavedPrompt(stored.tokens, state, int(state.nbytes)), on_file, stored
        return (None, saved, length, None) if saved is not None else (donor, None, held, None)

    def _set_aside(self, slot: Slot, *, kept: int, keep: SavedPrompt | None = None) -> None:
        """Save the slot's cache before all but `kept` tokens of it are dropped, when that
        loses `COPY_GAIN` tokens or more that no other slot or saved prompt holds. A slot a
        copy is still to fill has nothing to save yet (its data moves at the next decode)."""
        cache = self._cache
        if cache is None or len(slot.tokens) - kept < COPY_GAIN or slot.sequence in self._copies:
            return
        if cache.holds(slot.tokens):
            return
        if any(s is not slot and common_prefix(s.tokens, slot.tokens) == len(slot.tokens) for s in self._slots):
            return
        saved = self._backend.save(slot.sequence, cache.budget)
        if saved is not None:
            cache.put(slot.tokens, *saved, keep=keep)
