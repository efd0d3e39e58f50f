"""The llama.cpp engine driven directly, without the app: for tests of what only the engine sees."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from asgi_llm import ModelConfig
from asgi_llm.core import Finish, GenerationRequest, TextDelta
from asgi_llm.engines.inference_thread import InferenceThread
from asgi_llm.engines.llamacpp import LlamaCppEngine

__all__ = ["answered", "local_engine", "written"]


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


async def answered(engine: LlamaCppEngine, request: GenerationRequest) -> tuple[str, Finish]:
    """What one choice of `request` wrote, and how it finished."""
    text, finish = "", None
    async for event in engine.generate(request):
        if isinstance(event, TextDelta):
            text += event.text
        elif isinstance(event, Finish):
            finish = event
    assert finish is not None
    return text, finish


async def written(engine: LlamaCppEngine, request: GenerationRequest) -> tuple[str, str, int]:
    """What one choice of `request` wrote, how it finished, and after how many tokens."""
    text, finish = await answered(engine, request)
    return text, finish.reason, finish.usage.completion_tokens
