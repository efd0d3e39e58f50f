"""The contract for state a stateful protocol keeps between requests (Responses' `store`)."""

from __future__ import annotations

from typing import Any, Protocol

__all__ = ["StateStore"]


class StateStore(Protocol):
    """JSON objects by key, kept by the app for stateful protocols (Responses' `store`).

    In memory or SQLite; bounded by size and age. Values must be JSON-able.
    """

    async def get(self, key: str) -> dict[str, Any] | None: ...

    async def put(self, key: str, value: dict[str, Any]) -> None: ...

    async def delete(self, key: str) -> bool: ...
