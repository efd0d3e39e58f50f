"""The thread governor applied to one llama.cpp context (see `thread_governor`)."""

from __future__ import annotations

import logging
import math
import time
from typing import Any

import llama_cpp

from .core_load import CoreReader
from .thread_governor import WINDOW, ThreadGovernor

__all__ = ["GovernedThreads"]

log = logging.getLogger("asgi_llm.engine")


class GovernedThreads:
    """Looks at the cores at most every `WINDOW` seconds, from the inference thread, before a
    decode; prompt reading (`n_threads_batch`) gives up as many threads as decoding does."""

    def __init__(self, ctx: Any, threads: int, batch_threads: int, reader: CoreReader | None = None) -> None:
        self._ctx = ctx
        self._governor = ThreadGovernor(threads)
        self._batch_threads = batch_threads
        self._reader = reader if reader is not None else CoreReader()
        self._next_look = 0.0
        self._busy = 0.0  # seconds inside llama_decode

    @property
    def threads(self) -> int:
        return self._governor.threads

    def decoded(self, seconds: float) -> None:
        self._busy += seconds

    def check(self) -> None:
        now = time.monotonic()
        if now < self._next_look:
            return
        self._next_look = now + WINDOW
        sample = self._reader.sample(self._busy)
        if sample is None:  # nothing to read here: threads stay as configured
            self._next_look = math.inf
            return
        threads = self._governor.observe(sample)
        if threads is None:
            return
        batch = max(1, self._batch_threads - (self._governor.most - threads))
        llama_cpp.llama_set_n_threads(self._ctx, threads, batch)
        log.debug("decoding on %d of %d threads", threads, self._governor.most)
