"""The llama.cpp engine driven directly, without the app: for tests of what only the engine sees."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from asgi_llm import ModelConfig
from asgi_llm.engines.inference_thread import InferenceThread
from asgi_llm.engines.llamacpp import LlamaCppEngine

__all__ = ["local_engine"]


@contextlib.asynccontextmanager
async def local_engine(config: ModelConfig) -> AsyncIterator[LlamaCppEngine]:
    """A loaded engine on an inference thread of its own; both closed afterwards."""
    thread = InferenceThread()
    thread.start()
    engine = LlamaCppEngine(config, thread)
    try:
        await engine.load()
        yield engine
    finally:
        await engine.close()
        await thread.stop()
