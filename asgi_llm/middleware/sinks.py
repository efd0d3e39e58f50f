"""Usage sinks beyond a plain callback: a log line, or a JSON Lines file, per record.

(The SQLite ledger, the default persistent store, is `Ledger.record`; metrics are
`Metrics.observe`.)
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import anyio

from .usage import UsageRecord

__all__ = ["JSONLinesSink", "LoggingSink"]


class LoggingSink:
    """One log line per record, on `asgi_llm.usage` at INFO by default."""

    def __init__(self, logger: logging.Logger | None = None, level: int = logging.INFO) -> None:
        self._log = logger or logging.getLogger("asgi_llm.usage")
        self._level = level

    def __call__(self, record: UsageRecord) -> None:
        self._log.log(
            self._level,
            "%s %s %s key=%s model=%s status=%d prompt=%d completion=%d cached=%d ttft=%s duration=%.3f request=%s%s",
            record.protocol,
            record.method,
            record.endpoint,
            record.key or "-",
            record.model or "-",
            record.status,
            record.prompt_tokens,
            record.completion_tokens,
            record.cached_tokens,
            "-" if record.time_to_first_token is None else f"{record.time_to_first_token:.3f}",
            record.duration,
            record.request_id or "-",
            " disconnected" if record.disconnected else "",
            extra={"request_id": record.request_id or None},  # named in the line already
        )


class JSONLinesSink:
    """Appends each record as one JSON line. Each line is one `write` to a file opened for
    appending, so several processes may share the file; the write runs off the event loop."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    async def __call__(self, record: UsageRecord) -> None:
        line = json.dumps(record.as_dict(), separators=(",", ":")) + "\n"
        await anyio.to_thread.run_sync(self._append, line.encode("utf-8"))

    def _append(self, data: bytes) -> None:
        with self.path.open("ab") as file:
            file.write(data)
