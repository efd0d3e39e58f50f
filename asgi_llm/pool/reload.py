"""New settings served without a restart: models added, removed and changed while requests in
flight go on."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from ..config import ModelConfig, Settings
from .entry import ModelEntry
from .lifecycle import Lifecycle
from .residency import Residency, refuse_oversized_kv
from .roster import Roster

__all__ = ["Reloader"]

log = logging.getLogger("asgi_llm.pool")


class Reloader:
    """Moves a running (or stopped) pool's roster to new settings."""

    def __init__(self, models: Roster, residency: Residency, lifecycle: Lifecycle) -> None:
        self._models = models
        self._residency = residency
        self._lifecycle = lifecycle

    async def reload(self, settings: Settings | None, reloaded: Iterable[Callable[[Settings], None]]) -> None:
        """Serve `settings` (see `ModelPool.reload`), then tell `reloaded` the settings served."""
        models = self._models
        new = models.configured if settings is None else settings
        if any(m.is_upstream and m.discover for m in new.models):
            from ..engines.upstream import discover_settings  # imported only when discovery is asked for

            new = await discover_settings(new)
        new = new.with_models_dir()
        if models.started:
            await refuse_oversized_kv(new)  # refused: the previous settings serve on
        old = {entry.config.id: entry for entry in models.entries}
        entries = [await self._renewed(config, old.pop(config.id, None)) for config in new.models]
        for entry in old.values():
            log.info("model %s removed", entry.config.id)
            await self._lifecycle.retire(entry)
        models.retired([e for e in (*models.removed, *old.values()) if e.engine is not None])
        models.replace(new, entries, configured=settings)
        for entry in entries if models.started else ():
            if not entry.config.is_upstream:
                self._residency.estimate(entry)  # the budget may name other GPUs now
        for callback in reloaded:
            callback(new)
        if models.started:
            idle = [e for e in entries if e.config.load == "startup" and e.state == "unloaded" and e.engine is None]
            self._lifecycle.load_startup(idle)

    async def _renewed(self, config: ModelConfig, entry: ModelEntry | None) -> ModelEntry:
        """The entry serving `config`: a new one, or `entry` (its model's until now) with the
        config's options, retired to reload when idle if they changed."""
        started = self._models.started
        if entry is None:
            entry = ModelEntry(config)
            if started:
                await self._residency.read_facts(entry)
        elif entry.config != config:
            log.info("model %s changed: it reloads when idle", config.id)
            entry.reconfigure(config)
            if started:
                await self._residency.read_facts(entry)
            if entry.state in ("ready", "loading") or entry.engine is not None:
                await self._lifecycle.retire(entry)
            entry.reset()
        return entry
