"""What the pool's parts share: the models it serves (by id and alias), the settings that name
them, and whether the pool runs."""

from __future__ import annotations

from ..config import Settings
from ..core import Engine, ModelNotFound
from .entry import ModelEntry

__all__ = ["Roster"]


class Roster:
    """The models served now, by name, under `settings`; the pool runs while it has users."""

    def __init__(self, settings: Settings) -> None:
        self.configured = settings
        """The settings as given: a reload without new ones re-reads them (`models_dir`, discovery)."""
        self.settings = settings
        self.entries: list[ModelEntry] = []
        self.by_name: dict[str, ModelEntry] = {}
        self.removed: list[ModelEntry] = []  # dropped by a reload while requests still held them
        self.users = 0  # hosts that started the pool and have not stopped it
        self.serve(settings)

    @property
    def started(self) -> bool:
        return self.users > 0

    def join(self) -> bool:
        """One more host runs the pool; whether it is the first (and the pool starts)."""
        self.users += 1
        return self.users == 1

    def leave(self) -> bool:
        """A host stops running the pool; whether it was the last (and the pool stops)."""
        if self.users == 0:
            return False
        self.users -= 1
        return self.users == 0

    def retired(self, entries: list[ModelEntry]) -> None:
        """The models a reload dropped while requests still held them (none once the pool stops)."""
        self.removed = entries

    def serve(self, settings: Settings) -> None:
        """Serve `settings`' models (with `models_dir`'s, read now), none of them loaded."""
        settings = settings.with_models_dir()
        self.replace(settings, [ModelEntry(config) for config in settings.models])

    def replace(self, settings: Settings, entries: list[ModelEntry], *, configured: Settings | None = None) -> None:
        """Serve `entries`, the models of `settings` (a reload's, from the settings it was
        `configured` with, where it was given new ones)."""
        if configured is not None:
            self.configured = configured
        self.settings = settings
        self.entries = entries
        self.by_name = {name: entry for entry in entries for name in entry.config.names}

    def find(self, name: str) -> ModelEntry:
        """The model `name` (an id or alias) names; ModelNotFound if none."""
        entry = self.by_name.get(name)
        if entry is None:
            raise ModelNotFound(name)
        return entry

    def loaded(self, name: str) -> Engine | None:
        """The engine for `name` if it is loaded now; never loads or waits."""
        entry = self.by_name.get(name)
        return entry.engine if entry is not None and entry.state == "ready" else None

    def resident(self) -> list[ModelEntry]:
        """The models that count against the residency limits now."""
        return [entry for entry in self.entries if entry.resident]
