"""What the pool reports, typed: one model as a `ModelReport` (`/health`'s rows and the operators'
model list are two views of it, so a field is named once and says one thing), the residency
limits and what the resident models hold of them (`ResidencyReport`), and `/health` as a whole
(`PoolHealth`). Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["HealthStatus", "ModelReport", "PoolHealth", "ResidencyReport"]

HealthStatus = Literal["ok", "loading", "stalled", "error"]


@dataclass(frozen=True)
class ModelReport:
    """`kind`: where it runs; `backend`: its engine's own figures once loaded (sequences, prompt
    cache, memory; an upstream's replicas), empty before; `survived`: faults, stalls and restarts
    since it loaded; `last_used` a wall-clock time."""

    id: str
    aliases: tuple[str, ...]
    state: str
    kind: Literal["local", "upstream"]
    progress: float | None
    error: str | None
    pinned: bool
    estimated_memory: Mapping[str, Any] | None
    actual_memory: Mapping[str, Any] | None
    requests_in_flight: int
    queued: int
    last_used: float | None
    expires_at: float | None
    survived: Mapping[str, int] | None
    backend: Mapping[str, Any]
    chat_template: Mapping[str, Any] | None
    vision: bool = False  # it takes images (a projector, `mmproj`)

    def health_row(self, limited: bool) -> dict[str, Any]:
        """Its row in `/health`: state and progress, memory and pin where residency is limited, the error."""
        row: dict[str, Any] = {"id": self.id, "state": self.state}
        if self.progress is not None:
            row["progress"] = self.progress
        if limited and self.kind == "local":
            row["estimated_memory"] = self.estimated_memory
            row["pinned"] = self.pinned
        if self.error:
            row["error"] = self.error
        if self.backend:
            row["backend"] = dict(self.backend)
        return row

    def operator_row(self) -> dict[str, Any]:
        """Its row in the operators' list (`GET /admin/models`, the web page)."""
        return {
            "id": self.id,
            "aliases": list(self.aliases),
            "state": self.state,
            **({"progress": self.progress} if self.progress is not None else {}),
            **({"error": self.error} if self.error else {}),
            "kind": self.kind,
            "pinned": self.pinned,
            "estimated_memory": self.estimated_memory,
            "actual_memory": self.actual_memory,
            "requests_in_flight": self.requests_in_flight,
            "last_used": self.last_used,
            "expires_at": self.expires_at,
            "queued": self.queued,
            "health": dict(self.survived) if self.survived is not None else None,
            "backend": dict(self.backend),
            "chat_template": self.chat_template,
            **({"vision": True} if self.vision else {}),
        }


@dataclass(frozen=True)
class ResidencyReport:
    """The residency limits (None: not set) and what the resident models are estimated to hold of
    them; the GPU figures only where `gpu_memory_budget` is set, one per GPU it names."""

    max_loaded_models: int | None
    memory_budget: int | None
    loaded_models: int
    estimated_bytes: int
    gpu_memory_budget: tuple[int, ...] | None = None
    estimated_gpu_bytes: tuple[int, ...] | None = None

    def as_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "max_loaded_models": self.max_loaded_models,
            "memory_budget": self.memory_budget,
            "loaded_models": self.loaded_models,
            "estimated_bytes": self.estimated_bytes,
        }
        if self.gpu_memory_budget is not None:
            body["gpu_memory_budget"] = list(self.gpu_memory_budget)
            body["estimated_gpu_bytes"] = list(self.estimated_gpu_bytes or ())
        return body


@dataclass(frozen=True)
class PoolHealth:
    """`/health`: `ok` (200) only when a fresh request to every startup model can be served; else
    503, `loading`, `stalled` or `error`. `residency` where limits are set."""

    status: HealthStatus
    models: tuple[ModelReport, ...]
    residency: ResidencyReport | None = None

    @property
    def code(self) -> int:
        return 200 if self.status == "ok" else 503

    def body(self) -> dict[str, Any]:
        limited = self.residency is not None
        body: dict[str, Any] = {"status": self.status, "models": [m.health_row(limited) for m in self.models]}
        if self.residency is not None:
            body["residency"] = self.residency.as_dict()
        return body
