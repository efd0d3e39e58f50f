"""How many threads llama.cpp decodes with, window by window: fewer while other work crowds the
cores, all of them back once cores are free again.

llama.cpp's threads meet at a barrier for every operation, so a step is as slow as its slowest
thread: when something else (another process, the host's own work) takes one of the cores they
run on, every thread waits for the one that was preempted, and the model runs at a fraction of
the speed one thread fewer would give. On 2 cores with one core busy, 2 threads decoded 74
tokens/s and 1 thread 96 (benchmarks/contention.py). The signal is the inference thread's own
wait: time it was ready to run and the kernel gave it no core. Quiet, it waits 2–5% of the time;
with one of 2 cores busy, 40%. Cores that stay idle while the model runs on fewer threads say
that it may take one back.

Pure: the engine feeds it `CoreSample`s (see `core_load`) and applies what it answers.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CoreSample", "ThreadGovernor"]

WINDOW = 0.1  # seconds between decisions
CROWDED = 0.15  # the inference thread waited for a core this share of the time: give one up
CROWDED_WINDOWS = 2  # ...in this many windows running (one alone may be a moment's spike)
SPARE = 0.75  # cores idle on average while decoding: take one back
BUSY = 0.8  # a window decoding less of its time than this measured idleness, not decoding


@dataclass(frozen=True)
class CoreSample:
    at: float  # seconds, monotonic
    waited: float  # seconds the inference thread has been runnable without a core, so far
    idle: float  # idle core-seconds over the cores this process may use, so far
    busy: float  # seconds spent decoding, so far


class ThreadGovernor:
    def __init__(self, most: int) -> None:
        self.most = most
        self.threads = most
        self._last: CoreSample | None = None
        self._crowded = 0  # crowded windows in a row

    def observe(self, sample: CoreSample) -> int | None:
        """The new thread count when it changes, else None. Called about every `WINDOW` seconds
        while the model decodes. After a window spent mostly idle, every thread is tried again:
        a quiet machine is the common case, and crowded cores take two windows to notice."""
        last, self._last = self._last, sample
        if last is None:
            return None
        span = sample.at - last.at
        if span <= 0:
            return None
        if (sample.busy - last.busy) / span < BUSY:
            self._crowded = 0
            if self.threads == self.most:
                return None
            self.threads = self.most
            return self.threads
        waited = (sample.waited - last.waited) / span
        spare = (sample.idle - last.idle) / span
        self._crowded = self._crowded + 1 if waited >= CROWDED else 0
        if self._crowded >= CROWDED_WINDOWS and self.threads > 1:
            self._crowded = 0
            self.threads -= 1
            return self.threads
        if waited < CROWDED / 2 and spare >= SPARE and self.threads < self.most:
            self.threads += 1
            return self.threads
        return None
