"""Stop-sequence matching over streamed text, holding back only what might still match."""

from __future__ import annotations

__all__ = ["StopMatcher"]


class StopMatcher:
    """Feed text as it is decoded; get back what is safe to emit.

    Text that could be the start of a stop sequence is held back until the next
    piece shows whether it is one, so a stop string never reaches the client.
    """

    def __init__(self, stops: tuple[str, ...]) -> None:
        self._stops = tuple(s for s in stops if s)
        self._held = ""
        self.matched: str | None = None

    def feed(self, text: str) -> str:
        if not self._stops:
            return text
        buffer = self._held + text
        first: tuple[int, str] | None = None
        for stop in self._stops:
            at = buffer.find(stop)
            if at != -1 and (first is None or at < first[0]):
                first = (at, stop)
        if first is not None:
            self._held = ""
            self.matched = first[1]
            return buffer[: first[0]]
        keep = self._longest_partial(buffer)
        self._held = buffer[len(buffer) - keep :] if keep else ""
        return buffer[: len(buffer) - keep]

    def flush(self) -> str:
        """What was held back, once generation ends without a match."""
        held, self._held = self._held, ""
        return held

    def _longest_partial(self, buffer: str) -> int:
        best = 0
        for stop in self._stops:
            for size in range(min(len(stop) - 1, len(buffer)), best, -1):
                if buffer.endswith(stop[:size]):
                    best = size
                    break
        return best
