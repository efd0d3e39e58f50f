"""What the pool says of its models: /health, the operators' model list, the catalog the model
routes answer from, and engine health and queues for metrics. Reads only; never loads or waits."""

from __future__ import annotations

import time
from typing import Any

from ..core import EngineHealth, ModelCard, TemplateInUse, template_in_use
from .entry import ModelEntry, file_size
from .residency import Residency
from .roster import Roster

__all__ = ["Status"]


class Status:
    """Reports on the roster's models and the residency limits they are held to."""

    def __init__(self, models: Roster, residency: Residency) -> None:
        self._models = models
        self._residency = residency
        self._created = int(time.time())

    def health(self) -> tuple[int, dict[str, Any]]:
        """200 when every startup model is ready; 503 while one loads, after one failed, or while a
        loaded one is stalled (its work made no progress: a fresh request could not be served)."""
        entries, limited = self._models.entries, self._residency.limited
        models = [self._model_health(entry, limited) for entry in entries]
        pending = [e for e in entries if e.config.load == "startup" and e.state == "loading" and e.at_startup]
        failed = any(e.state == "failed" for e in entries)
        stalled = any(e.reported_state == "stalled" for e in entries)
        loading = pending or not self._models.started
        status = "error" if failed else "stalled" if stalled else "loading" if loading else "ok"
        body: dict[str, Any] = {"status": status, "models": models}
        if limited:
            body["residency"] = self._residency.summary()
        return (200 if status == "ok" else 503), body

    def residency(self) -> list[dict[str, Any]]:
        """Every model's state, estimated and (loaded) actual memory, pin and last use: the operators' model list."""
        now, wall = time.monotonic(), time.time()
        return [
            {
                "id": s.config.id,
                "aliases": list(s.config.aliases),
                "state": s.reported_state,
                **({"progress": s.progress} if s.state == "loading" else {}),
                **({"error": error} if (error := s.reported_error) else {}),
                "backend": "upstream" if s.config.is_upstream else "local",
                "pinned": s.pinned,
                "estimated_memory": None if s.config.is_upstream else s.cost.as_dict(),
                "actual_memory": measured.as_dict() if (measured := s.measured) is not None else None,
                "requests_in_flight": s.active,
                "last_used": round(wall - (now - s.last_used), 3) if s.last_used else None,
                "expires_at": s.expires_at,
                **_activity(s),
                "chat_template": _described(_template(s)),
            }
            for s in self._models.entries
        ]

    def catalog(self) -> list[ModelCard]:
        return [
            ModelCard(
                id=s.config.id,
                created=self._created,
                owned_by="asgi-llm",
                aliases=s.config.aliases,
                state=s.reported_state,
                context_length=s.engine.context_length if s.engine is not None else s.config.n_ctx,
                embeddings=s.config.embeddings,
                embedding_dimensions=s.config.embedding_dimensions,
                expires_at=s.expires_at,
                size=file_size(s.config),
                memory=memory.total,
                memory_vram=sum(memory.gpu),
                facts=s.facts,
                rerank=None if s.config.is_upstream else ("rank" if s.config.rerank else "judge"),
                template=_template(s),
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

    @staticmethod
    def _model_health(entry: ModelEntry, limited: bool) -> dict[str, Any]:
        health: dict[str, Any] = {"id": entry.config.id, "state": entry.reported_state}
        if entry.state == "loading":
            health["progress"] = entry.progress
        if limited and not entry.config.is_upstream:
            health["estimated_memory"] = entry.cost.as_dict()
            health["pinned"] = entry.pinned
        if error := entry.reported_error:
            health["error"] = error
        backend = entry.engine.describe() if entry.engine is not None else {}
        if backend:
            health["backend"] = dict(backend)
        return health


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


def _activity(entry: ModelEntry) -> dict[str, Any]:
    """What a loaded model is doing, for the operator's view: requests queued for it, the faults
    and stalls it survived since it loaded, and its engine's own figures (sequences, prompt
    cache, memory; an upstream's replicas)."""
    engine = entry.engine
    if engine is None:
        return {"queued": 0, "health": None, "backend": {}}
    health = engine.health()
    survived = {"faults": health.faults, "stalls": health.stalls, "restarts": health.restarts}
    return {"queued": engine.waiting, "health": survived, "backend": dict(engine.describe())}
