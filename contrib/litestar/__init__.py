"""asgi_llm in a Litestar app: `Litestar(plugins=[LLMPlugin(LLMConfig(settings))])`."""

from __future__ import annotations

from .config import LLMConfig
from .plugin import LLMPlugin

__all__ = ["LLMConfig", "LLMPlugin"]
