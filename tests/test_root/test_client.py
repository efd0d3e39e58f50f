"""`LLMApp.client()`: host code's requests go through the same parsing, layers and pool as HTTP
ones, under the identity the host names, and come back as core events."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncGenerator
from typing import Any

import anyio
import pytest
from pydantic import SecretStr

from asgi_llm import (
    ApiKeyConfig,
    ChatResult,
    LimitsConfig,
    LLMApp,
    ModelConfig,
    ModelPool,
    Settings,
    default_middleware,
)
from asgi_llm.core import (
    EngineEvent,
    Finish,
    Forbidden,
    GenerationRequest,
    InvalidRequest,
    ModelNotFound,
    RateLimited,
    TextDelta,
    Usage,
)
from asgi_llm.engines.fake import FakeEngine
from asgi_llm.middleware import UsageMiddleware, UsageRecord

pytestmark = pytest.mark.anyio

HI = [{"role": "user", "content": "Hi"}]
MODELS = (ModelConfig(id="fake", path="unused.gguf", aliases=("default",), embeddings=True),)


class SlowEngine(FakeEngine):
    """Yields a piece each time `step` is set, and tells when a generation stops, however it stops."""

    step: asyncio.Event
    stopped: list[str]

    async def _events(self, request: GenerationRequest) -> AsyncGenerator[EngineEvent, None]:
        try:
            for piece in ("one", " two", " three"):
                await self.step.wait()
                self.step.clear()
                yield TextDelta(piece)
            yield Finish("stop", Usage(3, 3))
        finally:
            self.stopped.append("stopped")


def app_with(engine: type[FakeEngine] = FakeEngine, **settings: Any) -> tuple[LLMApp, list[UsageRecord]]:
    """The app with its default layers, and the usage records they make."""
    records: list[UsageRecord] = []
    pool = ModelPool(Settings(models=MODELS, **settings), engine_factory=lambda config, thread: engine(config, thread))
    layers = default_middleware(pool)
    usage = next(layer for layer in layers if isinstance(layer, functools.partial) and layer.func is UsageMiddleware)
    recording = functools.partial(UsageMiddleware, **{**usage.keywords, "sinks": (*usage.keywords["sinks"], records.append)})
    return LLMApp(pool=pool, middleware=[recording if layer is usage else layer for layer in layers]), records


async def test_a_chat_streams_core_events_and_is_recorded_under_the_hosts_name() -> None:
    llm, records = app_with()
    client = llm.client(key="summarizer")
    async with llm.lifespan():
        async with client.stream_chat(HI, model="default", max_tokens=5) as stream:
            events = [event async for event in stream]
        whole = await client.chat(HI, model="default")
    assert events == [TextDelta("Hello"), TextDelta(" there"), Finish("stop", Usage(3, 2))]
    assert stream.result() == ChatResult(
        model="fake",
        request_id=stream.request_id,
        text="Hello there",
        reasoning="",
        tool_calls=(),
        finish_reason="stop",
        usage=Usage(3, 2),
    )
    assert whole.text == "Hello there" and whole.request_id != stream.request_id
    assert [(r.key, r.protocol, r.endpoint, r.model, r.status) for r in records] == [
        ("summarizer", "in_process", "/chat/completions", "fake", 200)
    ] * 2
    assert (records[0].prompt_tokens, records[0].completion_tokens, records[0].request_id) == (3, 2, stream.request_id)


async def test_fields_are_honoured_or_refused_as_over_http() -> None:
    llm, _ = app_with()
    client = llm.client()
    async with llm.lifespan():
        cut = await client.chat(HI, model="default", max_tokens=1)
        with pytest.raises(InvalidRequest) as refused:
            await client.chat(HI, model="default", mirostat=2)
        with pytest.raises(ModelNotFound):
            await client.chat(HI, model="no-such-model")
        with pytest.raises(TypeError, match="stream"):
            client.stream_chat(HI, model="default", stream=True)
    assert (cut.text, cut.finish_reason) == ("Hello", "length")
    assert refused.value.param == "mirostat" and refused.value.status == 400


async def test_completions_and_embeddings() -> None:
    llm, records = app_with()
    client = llm.client(key="site")
    async with llm.lifespan():
        completion = await client.complete("Once", model="default")
        vectors = await client.embed(["a", "b"], model="default")
    assert (completion.text, completion.finish_reason, completion.model) == ("Hello there", "stop", "fake")
    assert vectors.vectors == ((1.0, 0.0), (1.0, 0.0)) and vectors.usage == Usage(2, 0)
    assert [r.endpoint for r in records] == ["/completions", "/embeddings"]


async def test_a_configured_keys_limits_and_models_apply() -> None:
    keys = (
        ApiKeyConfig(name="site", key=SecretStr("s-1"), limits=LimitsConfig(requests_per_minute=1)),
        ApiKeyConfig(name="narrow", key=SecretStr("s-2"), models=("other",)),
    )
    llm, records = app_with(api_keys=keys)
    async with llm.lifespan():
        await llm.client(key="site").chat(HI, model="default")
        with pytest.raises(RateLimited) as limited:
            await llm.client(key="site").chat(HI, model="default")
        with pytest.raises(Forbidden) as forbidden:
            await llm.client(key="narrow").chat(HI, model="default")
        await llm.client(key="elsewhere").chat(HI, model="default")  # a name of the host's: default limits
    assert limited.value.status == 429 and limited.value.retry_after >= 1
    assert forbidden.value.param == "model"
    assert [(r.key, r.status) for r in records] == [("site", 200), ("site", 429), ("narrow", 403), ("elsewhere", 200)]


async def test_leaving_early_or_being_cancelled_stops_the_generation_and_frees_the_slot() -> None:
    keys = (ApiKeyConfig(name="site", key=SecretStr("s-1"), limits=LimitsConfig(max_concurrent=1)),)
    SlowEngine.step, SlowEngine.stopped = asyncio.Event(), []
    llm, records = app_with(SlowEngine, api_keys=keys)
    client = llm.client(key="site")
    async with llm.lifespan():
        async with client.stream_chat(HI, model="default") as stream:
            SlowEngine.step.set()
            async for event in stream:
                assert event == TextDelta("one")
                with pytest.raises(RateLimited):  # the open stream holds the key's one slot
                    await client.chat(HI, model="default")
                break
        assert SlowEngine.stopped == ["stopped"]

        async def chat() -> None:
            await client.chat(HI, model="default")

        async with anyio.create_task_group() as group:
            group.start_soon(chat)
            await anyio.sleep(0.05)
            group.cancel_scope.cancel()
        assert SlowEngine.stopped == ["stopped", "stopped"]
        SlowEngine.step = asyncio.Event()
        task = asyncio.ensure_future(client.chat(HI, model="default"))  # the slot is free again
        for _ in range(3):
            await asyncio.sleep(0.01)
            SlowEngine.step.set()
        result = await task
    assert result.text == "one two three"
    left = [(r.status, r.disconnected, r.completion_tokens) for r in records]
    assert left == [(429, False, 0), (200, True, 1), (200, True, 0), (200, False, 3)]  # the stream opened at once
