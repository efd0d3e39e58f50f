"""The real engine survives its own faults: a fault in one request's sampler, grammar,
detokenizer or stop matching ends that request with a 500 and the others go on; a broken
scheduler, or work that stalls, restarts the model, its requests ending with a 503 at once;
and a burst of conversations sharing a system prompt through a small prompt cache (the race
that leaked every slot) runs without a fault."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import pytest

from asgi_llm import ModelConfig
from asgi_llm.core import (
    ChatRequest,
    CompletionRequest,
    Finish,
    InternalError,
    Message,
    ModelNotReady,
    OutputFormat,
    SamplingParams,
    TextDelta,
)
from asgi_llm.engines.decoding.stops import StopMatcher
from asgi_llm.engines.llamacpp import LlamaCppEngine, batching, native, sampling

from .local_engine import local_engine

pytestmark = [pytest.mark.anyio, pytest.mark.model]
BOOM = 666  # the seed that marks the request a fault is injected into


@pytest.fixture(scope="module")
async def engine(anyio_backend: object) -> AsyncIterator[LlamaCppEngine]:
    """One loaded engine for the module's tests on each backend (named, so that pytest starts one per backend:
    on its own, anyio would keep the first backend's loop running for the other backend's tests)."""
    config = ModelConfig(n_ctx=1024, parallel=2, n_threads=1, stall_seconds=1.0, prompt_cache_mib=8)
    async with local_engine(config) as engine:
        yield engine


def _request(seed: int | None = None, max_tokens: int = 12, **extra: Any) -> CompletionRequest:
    params = SamplingParams(max_tokens=max_tokens, temperature=0.7, seed=seed, **extra)
    return CompletionRequest(model="m", prompts=("Once upon a time",), sampling=params)


async def _outcome(engine: LlamaCppEngine, request: Any) -> list[Any] | Exception:
    try:
        with anyio.fail_after(30):
            return [event async for event in engine.generate(request)]
    except Exception as exc:  # noqa: BLE001 (whatever the engine raised is what the test looks at)
        return exc


def _marked(monkeypatch: pytest.MonkeyPatch, method: str) -> None:
    """`Sampling.<method>` raises for choices of the marked request only."""
    made = sampling.Sampling.__init__
    original = getattr(sampling.Sampling, method)

    def init(self: Any, model: Any, logits: Any, params: SamplingParams, index: int, **options: Any) -> None:
        made(self, model, logits, params, index, **options)
        self.marked = params.seed == BOOM

    def failing(self: Any, *args: Any) -> Any:
        if self.marked:
            raise RuntimeError(f"{method} broke")
        return original(self, *args)

    monkeypatch.setattr(sampling.Sampling, "__init__", init)
    monkeypatch.setattr(sampling.Sampling, method, failing)


def _healthy(engine: LlamaCppEngine) -> None:
    runtime = engine.runtime
    assert runtime is not None
    assert runtime.scheduler.violations() == [] and runtime.scheduler.free_slots == 2


async def _check_faulty_request_alone(engine: LlamaCppEngine, faulty: Any) -> None:
    before = engine.health()
    fine, broken = await asyncio.gather(_outcome(engine, _request(max_tokens=24)), _outcome(engine, faulty))
    assert isinstance(broken, InternalError) and broken.status == 500
    assert "failed while serving this request" in broken.message and "broke" not in broken.message  # no internals
    assert isinstance(fine, list) and isinstance(fine[-1], Finish) and fine[-1].usage.completion_tokens == 24
    after = engine.health()
    assert after.faults == before.faults + 1 and after.restarts == before.restarts and after.stalled is None
    _healthy(engine)
    again = await _outcome(engine, _request())
    assert isinstance(again, list) and isinstance(again[-1], Finish)


@pytest.mark.parametrize("method", ["sample", "piece"])
async def test_a_fault_in_one_requests_sampler_or_detokenizer_ends_that_request_only(
    engine: LlamaCppEngine, monkeypatch: pytest.MonkeyPatch, method: str
) -> None:
    _marked(monkeypatch, method)
    await _check_faulty_request_alone(engine, _request(seed=BOOM))


async def test_a_fault_in_the_grammar_ends_that_request_only(engine: LlamaCppEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuses(grammar: Any, token: int) -> bool:
        raise RuntimeError("the grammar broke")

    monkeypatch.setattr(sampling, "allows", refuses)  # only a grammar-held output asks it
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    structured = ChatRequest(
        model="m",
        messages=(Message("user", "Give me a number."),),
        sampling=SamplingParams(max_tokens=30, temperature=0, output_format=OutputFormat("json_schema", "response_format", schema)),
    )
    await _check_faulty_request_alone(engine, structured)


async def test_a_fault_in_stop_matching_ends_that_request_only(engine: LlamaCppEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    original = StopMatcher.feed

    def feed(self: StopMatcher, text: str) -> str:
        if "BOOM" in self._stops:
            raise RuntimeError("stops broke")
        return original(self, text)

    monkeypatch.setattr(StopMatcher, "feed", feed)
    await _check_faulty_request_alone(engine, _request(stop=("BOOM",)))


async def test_a_broken_invariant_restarts_the_model_and_its_requests_get_a_503(
    engine: LlamaCppEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    _marked(monkeypatch, "sample")
    monkeypatch.setattr(batching.Scheduler, "violations", lambda self: ["a slot went astray (injected)"])
    before = engine.health()
    slow, broken = await asyncio.gather(
        _outcome(engine, _request(max_tokens=200)), _outcome(engine, _request(seed=BOOM))
    )
    assert isinstance(broken, InternalError)
    assert isinstance(slow, ModelNotReady) and slow.status == 503 and "restarted" in slow.message
    monkeypatch.undo()
    after = engine.health()
    assert after.restarts == before.restarts + 1 and after.stalled is None
    _healthy(engine)
    again = await _outcome(engine, _request())
    assert isinstance(again, list) and isinstance(again[-1], Finish)


async def test_a_fault_no_request_owns_restarts_the_model(engine: LlamaCppEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    original, raised = batching.plan, []

    def plan(active: list[Any], batch: int, chunk: int) -> Any:
        if not raised and active:
            raised.append(True)
            raise RuntimeError("planning broke")
        return original(active, batch, chunk)

    monkeypatch.setattr(batching, "plan", plan)
    before = engine.health()
    outcome = await _outcome(engine, _request())
    assert isinstance(outcome, ModelNotReady) and outcome.status == 503 and "restarted" in outcome.message
    assert engine.health().restarts == before.restarts + 1
    _healthy(engine)
    again = await _outcome(engine, _request())
    assert isinstance(again, list) and isinstance(again[-1], Finish)


@pytest.fixture
def one_slow_decode(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[float]]:
    """The next decode takes 3 s (a model that stopped answering, as far as anyone can tell)."""
    original = native.Decoder.decode
    slept: list[float] = []

    def decode(self: native.Decoder, batch: Any) -> None:
        if not slept:
            slept.append(time.monotonic())
            time.sleep(3.0)
        original(self, batch)

    monkeypatch.setattr(native.Decoder, "decode", decode)
    yield slept


async def test_work_that_stalls_gets_a_503_at_once_and_the_model_restarts(
    engine: LlamaCppEngine, one_slow_decode: list[float]
) -> None:
    before = engine.health()
    started = time.monotonic()
    stalled = await _outcome(engine, _request(max_tokens=40))
    assert isinstance(stalled, ModelNotReady) and stalled.status == 503 and "stalled" in stalled.message
    assert time.monotonic() - started < 2.9  # answered by the watchdog, not after the slow decode
    reason = engine.health().stalled  # until the restart, which waits for the slow decode
    assert reason is not None and "no progress" in reason
    refused = await _outcome(engine, _request())  # a fresh request is refused at once meanwhile
    assert isinstance(refused, ModelNotReady) and "not answering" in refused.message
    with anyio.fail_after(20):
        while engine.health().stalled is not None:
            await asyncio.sleep(0.05)
    after = engine.health()
    assert (after.stalls, after.restarts) == (before.stalls + 1, before.restarts + 1)
    _healthy(engine)
    again = await _outcome(engine, _request())
    assert isinstance(again, list) and isinstance(again[-1], Finish)


SYSTEM = (
    "You are the support assistant of a company that sells garden tools. Answer politely and briefly. "
    "Our opening hours are nine to five on weekdays. Returns are accepted within thirty days with a receipt. "
    "Shipping is free for orders over fifty euros. We sell spades, rakes, hoes, shears, hoses, wheelbarrows, "
    "gloves and seeds. Never promise a delivery date. If a customer is angry, apologise once and offer help. "
    "Do not discuss competitors. Do not give legal or medical advice. Refer warranty questions to the form on "
    "our website. Keep every answer under three sentences unless the customer asks for more detail. "
) * 2


async def test_conversations_sharing_a_system_prompt_through_a_small_prompt_cache_never_fault() -> None:
    """The reproduction of the slot leak: more conversations than sequences, a shared ~250-token
    system prompt, and a prompt cache that holds far less than the working set."""
    config = ModelConfig(n_ctx=1024, parallel=4, n_threads=1, prompt_cache_mib=8)
    async with local_engine(config) as engine:
        runtime = engine.runtime
        assert runtime is not None and runtime.cache is not None
        cached = 0

        async def conversation(number: int) -> None:
            nonlocal cached
            messages = [Message("system", SYSTEM)]
            for turn in range(3):
                messages.append(Message("user", f"Customer {number}, question {turn}: do you sell item {number * 7 + turn}?"))
                request = ChatRequest(model="m", messages=tuple(messages), sampling=SamplingParams(max_tokens=4, temperature=0))
                with anyio.fail_after(60):
                    events = [e async for e in engine.generate(request)]
                finish = events[-1]
                assert isinstance(finish, Finish), events
                cached += finish.usage.cached_tokens
                messages.append(Message("assistant", "".join(e.text for e in events if isinstance(e, TextDelta))))

        limit = asyncio.Semaphore(6)

        async def limited(number: int) -> None:
            async with limit:
                await conversation(number)

        await asyncio.gather(*(limited(n) for n in range(8)))
        assert engine.health().faults == 0 and engine.health().restarts == 0
        assert runtime.scheduler.violations() == [] and runtime.scheduler.free_slots == 4
        assert cached > 0 and runtime.cache.consistent()
