"""What the thread governor measures, read from Linux's /proc: how long the calling thread has
waited for a core (its scheduler statistics) and how long the cores this process may use have
been idle. Elsewhere (no /proc) there is nothing to read, and threads stay as configured."""

from __future__ import annotations

import os
import time
from pathlib import Path

from .thread_governor import CoreSample

__all__ = ["CoreReader"]

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class CoreReader:
    """Samples for one thread (the one that calls `sample`) over one set of cores."""

    def __init__(self, cpus: frozenset[int] | None = None, root: Path = Path("/proc")) -> None:
        if cpus is None:
            try:
                cpus = frozenset(os.sched_getaffinity(0))
            except (AttributeError, OSError):
                cpus = frozenset()
        self._lines = {f"cpu{n}" for n in cpus}
        self._root = root

    def sample(self, busy: float) -> CoreSample | None:
        """The figures now, with the seconds spent decoding so far (`busy`, the engine's count);
        None where they cannot be read."""
        try:
            schedstat = (self._root / "thread-self" / "schedstat").read_text().split()
            stat = (self._root / "stat").read_text()
        except OSError:
            return None
        if len(schedstat) < 2 or not self._lines:
            return None
        idle_ticks = 0
        seen = 0
        for line in stat.splitlines():
            fields = line.split()
            if fields and fields[0] in self._lines and len(fields) > 5:
                idle_ticks += int(fields[4]) + int(fields[5])  # idle, iowait
                seen += 1
        if not seen:
            return None
        return CoreSample(time.monotonic(), waited=int(schedstat[1]) / 1e9, idle=idle_ticks / _TICKS, busy=busy)
