"""The thread governor: fewer threads while the inference thread waits for cores, more once cores
sit idle; and the /proc figures it reads."""

from __future__ import annotations

from pathlib import Path

import pytest

from asgi_llm.engines.llamacpp.core_load import CoreReader
from asgi_llm.engines.llamacpp.thread_governor import BUSY, CROWDED, WINDOW, CoreSample, ThreadGovernor


class Timeline:
    """Samples a window apart, with chosen wait and idle shares per window."""

    def __init__(self) -> None:
        self.at = 100.0
        self.waited = 0.0
        self.idle = 0.0
        self.busy = 0.0

    def next(self, waited: float, idle: float, span: float = WINDOW, busy: float = 0.97) -> CoreSample:
        self.at += span
        self.waited += waited * span
        self.idle += idle * span
        self.busy += busy * span
        return CoreSample(self.at, self.waited, self.idle, self.busy)


def crowded_to_one() -> tuple[ThreadGovernor, Timeline]:
    """A governor of 2 threads that two crowded windows have brought down to one."""
    governor, time = ThreadGovernor(2), Timeline()
    governor.observe(time.next(0, 0))
    assert governor.observe(time.next(waited=0.4, idle=0.0)) is None
    assert governor.observe(time.next(waited=0.4, idle=0.0)) == 1
    return governor, time


def test_quiet_cores_keep_every_thread() -> None:
    governor, time = ThreadGovernor(4), Timeline()
    answers = [governor.observe(time.next(waited=0.03, idle=0.1)) for _ in range(10)]
    assert answers == [None] * 10
    assert governor.threads == 4


def test_crowded_cores_give_up_one_thread_per_two_windows_down_to_one() -> None:
    governor, time = ThreadGovernor(3), Timeline()
    governor.observe(time.next(0, 0))
    answers = [governor.observe(time.next(waited=0.4, idle=0.0)) for _ in range(6)]
    assert answers == [None, 2, None, 1, None, None]
    assert governor.threads == 1


def test_one_crowded_window_alone_is_a_spike() -> None:
    governor, time = ThreadGovernor(2), Timeline()
    governor.observe(time.next(0, 0))
    for _ in range(5):
        assert governor.observe(time.next(waited=0.5, idle=0.0)) is None
        assert governor.observe(time.next(waited=0.02, idle=0.0)) is None
    assert governor.threads == 2


def test_threads_come_back_once_cores_sit_idle() -> None:
    governor, time = crowded_to_one()
    assert governor.observe(time.next(waited=0.01, idle=0.1)) is None  # the other core is still taken
    assert governor.observe(time.next(waited=0.01, idle=0.95)) == 2
    assert governor.observe(time.next(waited=0.01, idle=0.95)) is None  # never above the configured count


def test_between_thresholds_nothing_changes() -> None:
    """Waits between half the threshold and the threshold hold the count both ways: no flapping."""
    governor, time = ThreadGovernor(2), Timeline()
    governor.observe(time.next(0, 0))
    governor.observe(time.next(waited=CROWDED, idle=0))
    assert governor.observe(time.next(waited=CROWDED, idle=0)) == 1  # the threshold itself counts as crowded
    assert governor.observe(time.next(waited=CROWDED * 0.75, idle=1.0)) is None
    assert governor.threads == 1


def test_after_an_idle_spell_every_thread_is_tried_again() -> None:
    governor, time = crowded_to_one()
    assert governor.observe(time.next(waited=0.0, idle=2.0, span=30, busy=0.01)) == 2
    assert governor.observe(time.next(waited=0.4, idle=0)) is None
    assert governor.observe(time.next(waited=0.4, idle=0)) == 1  # still crowded: two windows to notice


def test_a_mostly_idle_window_decides_nothing_on_its_figures() -> None:
    """Idle cores while nothing decodes say nothing about decoding; nor does a wait diluted by idleness."""
    governor, time = ThreadGovernor(2), Timeline()
    governor.observe(time.next(0, 0))
    assert governor.observe(time.next(waited=0.9, idle=0, busy=BUSY * 0.9)) is None
    assert governor.threads == 2


def test_one_configured_thread_never_moves() -> None:
    governor, time = ThreadGovernor(1), Timeline()
    answers = [governor.observe(time.next(waited=0.9, idle=1.0)) for _ in range(3)]
    assert answers == [None] * 3


def _proc(tmp_path: Path, waited_ns: int, idle: dict[int, tuple[int, int]]) -> Path:
    (tmp_path / "thread-self").mkdir(exist_ok=True)
    (tmp_path / "thread-self" / "schedstat").write_text(f"123456789 {waited_ns} 42\n")
    lines = ["cpu  1 2 3 4 5 6 7 0 0 0"]
    lines += [f"cpu{n} 10 0 20 {i} {w} 0 0 0 0 0" for n, (i, w) in idle.items()]
    (tmp_path / "stat").write_text("\n".join([*lines, "intr 1 2 3", "ctxt 99"]) + "\n")
    return tmp_path


def test_reader_sums_idle_over_the_allowed_cores_only(tmp_path: Path) -> None:
    import os

    ticks = os.sysconf("SC_CLK_TCK")
    root = _proc(tmp_path, 2_500_000_000, {0: (1000, 10), 1: (500, 5), 2: (7000, 0)})
    sample = CoreReader(frozenset({0, 1}), root).sample(busy=1.5)
    assert sample is not None
    assert sample.waited == pytest.approx(2.5)
    assert sample.idle == pytest.approx((1000 + 10 + 500 + 5) / ticks)
    assert sample.busy == 1.5


def test_reader_without_proc_gives_nothing(tmp_path: Path) -> None:
    assert CoreReader(frozenset({0}), tmp_path / "missing").sample(0.0) is None
    root = _proc(tmp_path, 1, {5: (1, 1)})
    assert CoreReader(frozenset({0}), root).sample(0.0) is None  # none of its cores listed


def test_reader_on_this_machine_moves_forward() -> None:
    reader = CoreReader()
    first = reader.sample(0.0)
    if not Path("/proc/thread-self/schedstat").exists():
        assert first is None
        return
    assert first is not None
    sum(i * i for i in range(200_000))
    second = reader.sample(0.0)
    assert second is not None
    assert second.at > first.at
    assert second.waited >= first.waited
    assert second.idle >= first.idle
