"""The LoRA adapter gate: one adapter setting on a context at a time; a different setting waits
for the running jobs, then the context's cells and saved prompts (computed under the old
weights) are dropped before the new setting is applied. Pure, over stand-ins of the backend."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from asgi_llm.engines.llamacpp.lora import AdapterGate


class Cells:
    def __init__(self) -> None:
        self.forgotten: list[int] = []
        self.cleared = 0

    def forget(self, sequence: int, start: int) -> None:
        self.forgotten.append(sequence)

    def clear(self) -> None:
        self.cleared += 1


def job(setting: tuple[float, ...]) -> Any:
    return SimpleNamespace(setting=setting)


def slots() -> list[Any]:
    return [SimpleNamespace(sequence=0, tokens=[1, 2, 3]), SimpleNamespace(sequence=1, tokens=[])]


def test_a_new_setting_waits_for_running_jobs_then_drops_cells_and_saved_prompts() -> None:
    cells, applied = Cells(), []
    gate = AdapterGate(cells, cells, applied.append)  # type: ignore[arg-type]
    held = slots()
    assert gate.admits(job((0.0,)), False, held) and applied == [(0.0,)] and gate.switches == 1
    held[0].tokens = [1, 2, 3]  # cells read under the first setting
    assert gate.admits(job((0.0,)), True, held) and gate.switches == 1  # same setting: batched together
    assert not gate.admits(job((1.0,)), True, held)  # another setting waits while jobs run
    assert held[0].tokens == [1, 2, 3] and applied == [(0.0,)]
    assert gate.admits(job((1.0,)), False, held)
    assert applied == [(0.0,), (1.0,)] and gate.current == (1.0,) and gate.switches == 2
    assert held[0].tokens == [] and cells.forgotten == [0, 0] and cells.cleared == 2


def test_a_failed_switch_keeps_the_old_setting_and_the_next_admission_tries_again() -> None:
    cells, applied = Cells(), []

    def apply(setting: tuple[float, ...]) -> None:
        if setting == (1.0,) and not applied:
            applied.append("failed")
            raise RuntimeError("llama_set_adapters_lora failed")
        applied.append(setting)

    gate = AdapterGate(cells, None, apply)  # type: ignore[arg-type]
    with pytest.raises(RuntimeError):
        gate.admits(job((1.0,)), False, slots())
    assert gate.current is None and gate.switches == 0  # never claims a setting it did not set
    assert gate.admits(job((1.0,)), False, slots()) and gate.current == (1.0,) and applied == ["failed", (1.0,)]
