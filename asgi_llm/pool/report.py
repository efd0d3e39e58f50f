"""One model as the pool reports it: `/health`'s rows and the operators' model list are two views
of one `ModelReport`, so a field is named once and says one thing. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["ModelReport"]


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
        }
