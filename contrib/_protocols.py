"""What every host integration serves by default, and where Ollama clients look for it."""

from __future__ import annotations

from ..adapters.anthropic import ANTHROPIC
from ..adapters.base import Adapter
from ..adapters.ollama import OLLAMA
from ..adapters.openai import OPENAI

__all__ = ["DEFAULT_ADAPTERS", "OLLAMA", "ollama_root_paths"]

DEFAULT_ADAPTERS: tuple[Adapter, ...] = (OPENAI, ANTHROPIC)
"""OpenAI and Anthropic under one prefix (`/v1`), where both SDKs look, as `asgi-llm serve` does."""


def ollama_root_paths() -> tuple[str, ...]:
    """The Ollama routes a host answers at its root: `/api/*`, never the host's own `/`."""
    return tuple(sorted({route.path for route in OLLAMA.routes if route.path != "/"}))
