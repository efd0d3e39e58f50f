"""The Prometheus text exposition format (version 0.0.4), written out by hand: counters,
gauges and histograms keyed by label values. No dependency, no global registry."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

__all__ = ["CONTENT_TYPE", "Counter", "Gauge", "Histogram"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

LabelValues = tuple[str, ...]


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(names: Sequence[str], values: Sequence[str]) -> str:
    if not names:
        return ""
    return "{" + ",".join(f'{n}="{_escape(v)}"' for n, v in zip(names, values)) + "}"


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return str(int(value)) if float(value).is_integer() else repr(float(value))


class _Family:
    kind = ""

    def __init__(self, name: str, help: str, labels: Sequence[str]) -> None:
        self.name = name
        self.help = help
        self.labels = tuple(labels)
        self._values: dict[LabelValues, float] = {}

    def _header(self) -> Iterator[str]:
        yield f"# HELP {self.name} {self.help}"
        yield f"# TYPE {self.name} {self.kind}"

    def value(self, labels: LabelValues) -> float:
        return self._values.get(labels, 0.0)

    def render(self) -> Iterator[str]:
        yield from self._header()
        for labels, value in sorted(self._values.items()):
            yield f"{self.name}{_labels(self.labels, labels)} {_number(value)}"


class Counter(_Family):
    kind = "counter"

    def inc(self, labels: LabelValues, amount: float = 1.0) -> None:
        self._values[labels] = self._values.get(labels, 0.0) + amount

    def total(self, labels: LabelValues, value: float) -> None:
        """A count kept elsewhere (it starts again from 0 when its owner does, as counters may)."""
        self._values[labels] = value


class Gauge(_Family):
    kind = "gauge"

    def inc(self, labels: LabelValues, amount: float = 1.0) -> None:
        self._values[labels] = self._values.get(labels, 0.0) + amount

    def set(self, labels: LabelValues, value: float) -> None:
        self._values[labels] = value

    def clear(self) -> None:
        self._values.clear()


class Histogram(_Family):
    kind = "histogram"

    def __init__(self, name: str, help: str, labels: Sequence[str], buckets: Sequence[float]) -> None:
        super().__init__(name, help, labels)
        self.buckets = tuple(sorted(buckets))
        self._counts: dict[LabelValues, list[int]] = {}

    def observe(self, labels: LabelValues, value: float) -> None:
        counts = self._counts.setdefault(labels, [0] * (len(self.buckets) + 1))
        index = next((i for i, bound in enumerate(self.buckets) if value <= bound), len(self.buckets))
        counts[index] += 1
        self._values[labels] = self._values.get(labels, 0.0) + value

    def render(self) -> Iterator[str]:
        yield from self._header()
        names = (*self.labels, "le")
        for labels, counts in sorted(self._counts.items()):
            running = 0
            for bound, count in zip((*self.buckets, math.inf), counts):
                running += count
                yield f"{self.name}_bucket{_labels(names, (*labels, _number(bound)))} {running}"
            yield f"{self.name}_sum{_labels(self.labels, labels)} {_number(self._values[labels])}"
            yield f"{self.name}_count{_labels(self.labels, labels)} {running}"
