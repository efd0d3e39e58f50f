"""asgi_llm: a mountable ASGI app that serves local GGUF models over popular LLM wire protocols."""

from .app import LLMApp
from .config import ModelConfig, Settings
from .pool import ModelPool

__all__ = ["LLMApp", "ModelConfig", "ModelPool", "Settings"]
