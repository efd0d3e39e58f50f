"""What the pool says of its models: /health, the operators' model list, the catalog the model
routes answer from, and engine health and queues for metrics. Reads only; never loads or waits."""

from __future__ import annotations

import time
from typing import Any

from ..core import EngineHealth, ModelCard, ModelState, TemplateInUse, template_in_use
from .entry import ModelEntry, file_size
from .report import HealthStatus, ModelReport, PoolHealth
from .residency import Residency
from .roster import Roster

__all__ = ["ModelReport", "Status"]


class Status:
    """Reports on the roster's models and the residency limits they are held to."""

    def __init__(self, models: Roster, residency: Residency) -> None:
        self._models = models
        self._residency = residency
        self._created = int(time.time())

    def health(self) -> PoolHealth:
        """`ok` when every startup model is ready; else `loading` while one loads, `error` after
        one failed, `stalled` while a loaded one is (its work made no progress: a fresh request
        could not be served)."""
        entries = self._models.entries
        pending = [e for e in entries if e.config.load == "startup" and e.state == "loading" and e.at_startup]
        failed = any(e.state == "failed" for e in entries)
        stalled = any(_state(e) == "stalled" for e in entries)
        loading = pending or not self._models.started
        status: HealthStatus = "error" if failed else "stalled" if stalled else "loading" if loading else "ok"
        residency = self._residency.summary() if self._residency.limited else None
        return PoolHealth(status, tuple(self.reports()), residency)

    def residency(self) -> list[dict[str, Any]]:
        """Every model's state, estimated and (loaded) actual memory, pin and last use: the operators' model list."""
        return [report.operator_row() for report in self.reports()]

    def reports(self) -> list[ModelReport]:
        now, wall = time.monotonic(), time.time()
        return [_report(entry, now, wall) for entry in self._models.entries]

    def catalog(self) -> list[ModelCard]:
        return [
            ModelCard(
                id=s.config.id,
                created=self._created,
                owned_by="asgi-llm",
                aliases=s.config.aliases,
                state=_state(s),
                context_length=s.engine.context_length if s.engine is not None else s.config.n_ctx,
                embeddings=s.config.embeddings,
                embedding_dimensions=s.config.embedding_dimensions,
                expires_at=s.holders.expires_at,
                size=file_size(s.config),
                memory=memory.total,
                memory_vram=sum(memory.gpu),
                facts=s.facts,
                rerank=None if s.config.is_upstream else ("rank" if s.config.rerank else "judge"),
                template=_template(s),
                vision=s.config.mmproj is not None,
            )
            for s, memory in ((s, s.measured or s.cost) for s in self._models.entries)
        ]

    def engine_health(self) -> list[tuple[str, EngineHealth]]:
        """Each loaded model's engine health (faults survived, stalls, restarts), for metrics."""
        return [(s.config.id, s.engine.health()) for s in self._models.entries if s.engine is not None]

    def queued(self, name: str) -> int:
        """Requests waiting for `name` behind the one being generated (0 when not loaded)."""
        engine = self._models.loaded(name)
        return engine.waiting if engine is not None else 0


def _state(entry: ModelEntry) -> ModelState:
    """Its state as reported: a loaded model whose engine says it cannot serve now is `stalled`."""
    if entry.state == "ready" and entry.engine is not None and entry.engine.health().stalled is not None:
        return "stalled"
    return entry.state


def _error(entry: ModelEntry) -> str | None:
    """Why the model cannot serve: its load's failure, or what its engine says."""
    if entry.state == "ready" and entry.engine is not None:
        return entry.engine.health().stalled
    return entry.error


def _progress(entry: ModelEntry) -> float | None:
    """How far a loading model has read its weights (0 to 1); None unless it is loading."""
    if entry.state != "loading":
        return None
    engine = entry.loading_engine
    return round(float(engine.progress), 3) if engine is not None else 0.0


def _template(entry: ModelEntry) -> TemplateInUse | None:
    """The chat template serving a local model, once its file's header is read (or the config names one)."""
    config = entry.config
    if config.is_upstream or not (config.chat_template or entry.facts.architecture):
        return None
    return template_in_use(config.chat_template, entry.facts.metadata)


def _described(template: TemplateInUse | None) -> dict[str, Any] | None:
    if template is None:
        return None
    return {"origin": template.origin, "name": template.name, "fallback": template.fallback, "ends_at": template.end}


def _report(entry: ModelEntry, now: float, wall: float) -> ModelReport:
    engine, holders = entry.engine, entry.holders
    health = engine.health() if engine is not None else None
    upstream = entry.config.is_upstream
    return ModelReport(
        id=entry.config.id,
        aliases=tuple(entry.config.aliases),
        state=_state(entry),
        kind="upstream" if upstream else "local",
        progress=_progress(entry),
        error=_error(entry) or None,
        pinned=entry.pinned,
        estimated_memory=None if upstream else entry.cost.as_dict(),
        actual_memory=measured.as_dict() if (measured := entry.measured) is not None else None,
        requests_in_flight=holders.count,
        queued=engine.waiting if engine is not None else 0,
        last_used=round(wall - (now - holders.last_used), 3) if holders.last_used else None,
        expires_at=holders.expires_at,
        survived=None
        if health is None
        else {"faults": health.faults, "stalls": health.stalls, "restarts": health.restarts},
        backend=engine.describe() if engine is not None else {},
        chat_template=_described(_template(entry)),
        vision=entry.config.mmproj is not None,
    )
