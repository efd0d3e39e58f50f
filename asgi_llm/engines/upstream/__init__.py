"""An OpenAI-compatible server over HTTP as an engine: llama-server, vLLM, another asgi-llm.

The only package that imports httpx. `wire`, `stream` and `errors` are pure translations;
`reading` reads the answers the engine receives, without HTTP; `replicas` picks a healthy
server; `engine` does the I/O.
"""

from __future__ import annotations

from .engine import UpstreamEngine, discover_settings

__all__ = ["UpstreamEngine", "discover_settings"]
