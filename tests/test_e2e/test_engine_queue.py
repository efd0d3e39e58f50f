"""The llama.cpp engine's queue bound, with the real model: beyond it a request is refused at once."""

from __future__ import annotations

import contextlib

import pytest

from asgi_llm import ModelConfig
from asgi_llm.core import ChatRequest, Message, Overloaded, SamplingParams, TextDelta
from asgi_llm.engines.inference_thread import InferenceThread
from asgi_llm.engines.llamacpp import LlamaCppEngine

pytestmark = pytest.mark.anyio
REQUEST = ChatRequest(
    model="m",
    messages=(Message("user", "Tell me a story."),),
    sampling=SamplingParams(max_tokens=40, temperature=0, logit_bias=((0, -100.0), (2, -100.0))),
)


async def test_requests_beyond_max_queue_get_overloaded() -> None:
    thread = InferenceThread()
    thread.start()
    engine = LlamaCppEngine(ModelConfig(n_ctx=512, max_queue=0), thread)
    try:
        await engine.load()
        running = engine.generate(REQUEST)
        async with contextlib.aclosing(running):
            first = await running.__anext__()
            assert isinstance(first, TextDelta)
            assert engine.waiting == 0  # one running, none behind it
            refused = engine.generate(REQUEST)
            with pytest.raises(Overloaded):
                await refused.__anext__()
            rest = [event async for event in running]
        assert rest[-1].usage.completion_tokens == 40  # type: ignore[union-attr]
        after = [event async for event in engine.generate(REQUEST)]  # the slot was freed
        assert len(after) > 1
    finally:
        await engine.close()
        await thread.stop()
