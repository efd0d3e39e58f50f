"""Ollama sends tool calls whole, as Ollama does: a call whose arguments stream in pieces (the
events a forced call's decoding makes) reaches the official ollama SDK as one whole call each,
its arguments the parsed concatenation of the pieces. (Ollama's API cannot force a call, so the
real model is not asked for one here: the engine below replays a forced call's decoding.)"""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncGenerator

import httpx
import ollama
import pytest

from asgi_llm import LLMApp, ModelConfig, ModelPool, Settings
from asgi_llm.adapters.ollama import OLLAMA
from asgi_llm.core import EngineEvent, Finish, GenerationRequest, TextDelta, ToolSpec, Usage
from asgi_llm.engines.decoding.tool_calls import forced_calls, plan_calls
from asgi_llm.engines.fake import FakeEngine

pytestmark = pytest.mark.anyio

TOOLS = (
    ToolSpec("get_weather", None, {"type": "object", "properties": {"city": {"type": "string"}}}),
    ToolSpec("get_time", None, {}),
)
FIRST = '{"city": "Paris, the capital of France"}'
TEXT = f'[{{"name": "get_weather", "arguments": {FIRST}}}, {{"name": "get_time", "arguments": {{}}}}]'


class CallingEngine(FakeEngine):
    """Replays the decoding of two forced calls, three characters a token."""

    def generate(self, request: GenerationRequest) -> AsyncGenerator[EngineEvent, None]:
        return self._calls()

    async def _calls(self) -> AsyncGenerator[EngineEvent, None]:
        counter = itertools.count()
        tokens = [TextDelta(TEXT[i : i + 3]) for i in range(0, len(TEXT), 3)]
        plan = plan_calls(TOOLS, "required", parallel=True)
        for event in forced_calls([*tokens, Finish("stop", Usage(3, len(tokens)))], plan, lambda: f"c{next(counter)}"):
            if event is not None:
                yield event


async def test_the_ollama_sdk_gets_each_streamed_call_whole() -> None:
    models = (ModelConfig(id="m", path="unused.gguf"),)
    pool = ModelPool(Settings(models=models), engine_factory=lambda c, t: CallingEngine(c, t))
    transport = httpx.ASGITransport(app=LLMApp(pool=pool, adapters=(OLLAMA,)))
    client = ollama.AsyncClient(host="http://t", transport=transport)
    ask = [{"role": "user", "content": "Weather and time?"}]
    parts = [part async for part in await client.chat(model="m", messages=ask, stream=True)]
    calls = [call for part in parts for call in part.message.tool_calls or ()]
    assert [(c.function.name, dict(c.function.arguments)) for c in calls] == [
        ("get_weather", json.loads(FIRST)),
        ("get_time", {}),
    ]
    assert [len(part.message.tool_calls or ()) for part in parts if part.message.tool_calls] == [1, 1]
    assert parts[-1].done and not any(p.done for p in parts[:-1])
