"""asgi_llm: a mountable ASGI app that serves local GGUF models over popular LLM wire protocols."""

from .app import LLMApp, default_middleware
from .client import ChatResult, ChatStream, Client, Completion, Embeddings, ToolCall
from .config import ApiKeyConfig, LimitsConfig, ModelConfig, Settings
from .middleware import KeyInfo, Limits
from .pool import ModelPool

__all__ = [
    "ApiKeyConfig",
    "ChatResult",
    "ChatStream",
    "Client",
    "Completion",
    "Embeddings",
    "KeyInfo",
    "LLMApp",
    "Limits",
    "LimitsConfig",
    "ModelConfig",
    "ModelPool",
    "Settings",
    "ToolCall",
    "default_middleware",
]
