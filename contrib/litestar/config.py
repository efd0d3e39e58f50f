"""What the Litestar plugin serves, and where."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ...adapters.base import Adapter
from ...config import Settings
from .._protocols import DEFAULT_ADAPTERS

__all__ = ["LLMConfig"]


@dataclass(frozen=True)
class LLMConfig:
    settings: Settings = field(default_factory=Settings)
    path: str = "/v1"
    """Where the OpenAI and Anthropic APIs (`adapters`) are mounted."""
    ollama_at_root: bool = False
    """Also answer Ollama's `/api/*` routes at the app's root, where Ollama clients look."""
    adapters: Sequence[Adapter] = DEFAULT_ADAPTERS

    def __post_init__(self) -> None:
        if not self.path.startswith("/") or self.path.rstrip("/") == "":
            raise ValueError(f"path must start with '/' and not be '/', not {self.path!r}")
