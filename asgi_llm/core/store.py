"""The contracts for state a stateful protocol keeps between requests (Responses' `store`)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Protocol

__all__ = ["SharedStateStore", "StateStore"]


class StateStore(Protocol):
    """JSON objects by key, kept by the app for stateful protocols (Responses' `store`).

    In memory, SQLite or PostgreSQL; bounded by size and age. Values must be JSON-able.
    """

    async def get(self, key: str) -> dict[str, Any] | None: ...

    async def put(self, key: str, value: dict[str, Any]) -> None: ...

    async def delete(self, key: str) -> bool: ...


class SharedStateStore(ABC):
    """A `StateStore` whose entries outlive the process and are seen by every process sharing it
    (SQLite, PostgreSQL), so background runs may be kept in it: a store declares it by deriving
    from this class, and is checked by type."""

    @abstractmethod
    async def get(self, key: str) -> dict[str, Any] | None: ...

    @abstractmethod
    async def put(self, key: str, value: dict[str, Any]) -> None: ...

    @abstractmethod
    async def delete(self, key: str) -> bool: ...

    @abstractmethod
    async def scan(self, suffix: str) -> list[tuple[str, dict[str, Any]]]:
        """Every entry whose key ends with `suffix` (every owner's): for the sweep at startup."""
