"""`LlamaCppEngine`: one GGUF model, its choices decoded together by a continuous-batching
scheduler on the inference thread (runtime.py); on the event loop, the requests it serves and
the watchdog that keeps them from waiting on a model that makes no progress (watchdog.py); on
worker threads, the grammars of their schemas (pure Python that may take seconds, which on the
inference thread would stall every stream), kept in the engine's `Grammars`."""

from __future__ import annotations

import asyncio  # only to name the loop that the inference thread hands this request's events to
import logging
from collections.abc import AsyncGenerator
from dataclasses import replace
from typing import Any

import anyio

from ...config import ModelConfig
from ...core.engine import Embedder, EngineHealth, ImageReader, LoraOwner, Reranker, TokenizerOwner
from ...core.errors import ContextOverflow, ModelNotReady, Overloaded
from ...core.events import EmbeddingResult, EngineEvent
from ...core.ranking import RerankKind, RerankRequest, RerankResult
from ...core.requests import EmbeddingRequest, GenerationRequest
from ..decoding.compiled import Grammars
from ..decoding.constraints import Constraint, compiles, constraint_for
from ..inference_thread import Channel, InferenceThread
from ..memory_estimate import MemoryEstimate
from .choice import Tally
from .jobs import Delivery, Ticket, delivered
from .lora import AdapterDefaults
from .native import backend_info
from .prompt_bound import at_least
from .runtime import Runtime
from .vocabulary import Vocabulary
from .waiting import waiting
from .watchdog import OpenRequests, Watchdog

__all__ = ["LlamaCppEngine"]

log = logging.getLogger("asgi_llm.engine")

COMPILES = 2
"""Schemas one engine compiles at once, on worker threads: each holds the GIL while it runs,
which slows the inference thread's share of every step (measured: 12 ms a token became 31 ms
beside one compile), so a burst of new schemas waits rather than crowd the decode out."""


class LlamaCppEngine(Embedder, Reranker, TokenizerOwner, LoraOwner, ImageReader):
    """One GGUF model. Up to `config.parallel` choices decode at once; the rest wait in FIFO order.
    It embeds, reranks, tokenizes and applies LoRA adapters; with a projector (`mmproj`), its chats
    take images."""

    def __init__(self, config: ModelConfig, thread: InferenceThread) -> None:
        self.config = config
        self._thread = thread
        self.progress = 0.0
        """Fraction of the weights read while loading (llama.cpp's progress callback), for /health."""
        self.runtime: Runtime | None = None  # written on the inference thread, once loaded
        self._tally = Tally()
        self._requests = OpenRequests()
        self._watchdog: Watchdog | None = None
        self.rerank_kind: RerankKind = "rank" if config.rerank else "judge"
        self.lora = AdapterDefaults(config)
        """Its adapters' default scales: kept across restarts in place, read by each request."""
        self.grammars = Grammars()
        """What its requests' schemas and grammars compiled to, kept (bounded) while it is loaded."""
        self._compiling = anyio.CapacityLimiter(COMPILES)

    @property
    def context_length(self) -> int:
        """Positions one choice may use (prompt and output)."""
        return self.runtime.context_length if self.runtime is not None else self.config.n_ctx

    @property
    def reads_images(self) -> bool:
        """Whether its chats take images: it has a projector (once loaded, one that loaded)."""
        runtime = self.runtime
        return runtime.projector is not None if runtime is not None else self.config.mmproj is not None

    @property
    def decoded_tokens(self) -> int:
        """Tokens sampled since load (read by metrics and tests)."""
        return self._tally.tokens

    @property
    def memory(self) -> MemoryEstimate | None:
        """What llama.cpp allocated for it (weights, KV cache, compute buffers, per GPU) once loaded,
        with the prompt cache's budget (host memory it may fill)."""
        return self.runtime.memory if self.runtime is not None else None

    @property
    def waiting(self) -> int:
        """Requests waiting for a free sequence (read by metrics and the queue bound)."""
        running = self.runtime.scheduler.view.running if self.runtime is not None else 0
        return max(len(self._requests) - running, 0)

    def health(self) -> EngineHealth:
        runtime, watchdog = self.runtime, self._watchdog
        stalled, stalls = (watchdog.stalled, watchdog.stalls) if watchdog is not None else (None, 0)
        if runtime is None:
            return EngineHealth(stalled=stalled, stalls=stalls)
        faults = runtime.faults + runtime.scheduler.view.faults
        health = EngineHealth(
            stalled=stalled or runtime.failed, faults=faults, stalls=stalls, restarts=runtime.restarts
        )
        drafting = runtime.drafting
        if drafting is None:
            return health
        return replace(
            health,
            drafted=drafting.drafted,
            accepted=drafting.accepted,
            recalled=drafting.recalled,
            recalled_accepted=drafting.recalled_accepted,
            remembered=len(drafting.memory) if drafting.memory is not None else 0,
        )

    def describe(self) -> dict[str, Any]:
        runtime = self.runtime
        if runtime is None:
            return {}
        return {
            **backend_info(),
            **runtime.describe(),
            "parallel": self.config.parallel,
            "n_gpu_layers": self.config.n_gpu_layers,
            "n_threads": self.config.threads,
            "threads_now": governed.threads
            if (governed := runtime.decoder.threads) is not None
            else self.config.threads,
            "sequences": {"busy": (view := runtime.scheduler.view).slots - view.free, "free": view.free},
            **({"memory": runtime.memory.as_dict()} if runtime.memory is not None else {}),
        }

    async def load(self) -> None:
        self.runtime = runtime = await self._thread.call(
            lambda: Runtime(self.config, self._loading, self._tally, self.lora)
        )
        log.info("loaded %s: %s", self.config.id, self.describe())
        if self.config.n_gpu_layers and not backend_info()["gpu_offload"]:
            log.warning(
                "n_gpu_layers=%s asked for, but this llama-cpp-python build has no GPU offload",
                self.config.n_gpu_layers,
            )
        await self._thread.attach(runtime)

        async def restart(why: str) -> None:
            await self._thread.call(lambda: runtime.restart(why))

        def moved() -> float:
            return runtime.scheduler.view.moved

        self._watchdog = Watchdog(self.config.id, self.config.stall_seconds, self._requests, moved, restart)
        self._watchdog.start()

    async def close(self) -> None:
        if self._watchdog is not None:
            await self._watchdog.stop()
        runtime, self.runtime = self.runtime, None
        if runtime is not None:
            await self._thread.detach(runtime)
            await self._thread.call(runtime.close)

    def generate(self, request: GenerationRequest) -> AsyncGenerator[EngineEvent, None]:
        return self._generate(request)

    async def embed(self, request: EmbeddingRequest) -> EmbeddingResult:
        runtime = self._serving()
        size = min(runtime.context_length, 2048)  # the Embedder's context
        if not request.truncate:
            for i, item in enumerate(request.inputs):
                if isinstance(item, str) and (
                    surely := at_least(len(item), limit=size, longest=runtime.model.longest_piece)
                ):
                    raise ContextOverflow(
                        f"Input {i} is at least {surely.tokens} tokens; this model embeds at most {size}.",
                        param="input",
                    )
        return await self._thread.call(lambda: runtime.embed(request))

    async def rerank(self, request: RerankRequest) -> RerankResult:
        """By rank pooling, at once on the inference thread; or judged, one job per document
        through the scheduler, which queues them like any request's choices."""
        runtime = self._serving()
        if self.rerank_kind == "rank":
            return await self._thread.call(lambda: runtime.reranker.rank(request))
        channel: Channel[Delivery] = self._thread.channel(asyncio.get_running_loop())
        ticket = Ticket(channel.send, choices=0)
        with self._requests.holding(ticket, channel):
            verdicts, waits = await self._thread.call(lambda: runtime.reranker.judge(request, ticket))
            if waits:
                async for _ in waiting(channel, ticket, timeout=self.config.queue_timeout, model=self.config.id):
                    pass
            async for _ in delivered(channel.receive):
                pass
        scores = tuple(v.score if v.score is not None else 0.0 for v in verdicts)
        return RerankResult(scores, sum(v.prompt_tokens for v in verdicts))

    async def count_tokens(self, request: GenerationRequest) -> int:
        runtime = self._serving()
        runtime.prompts.refuse_surely_too_long(request)
        return await self._thread.call(lambda: runtime.count(request))

    def tokenizer(self) -> Vocabulary:
        return Vocabulary(self._thread, self._serving())

    def adapters(self) -> AdapterDefaults:
        return self.lora

    def _serving(self) -> Runtime:
        """The loaded runtime, unless the model cannot serve a fresh request now."""
        if self.runtime is None:
            raise ModelNotReady("The model is not loaded yet.")
        stalled = self._watchdog.stalled if self._watchdog is not None else None
        if stalled is not None:
            raise ModelNotReady(f"The model '{self.config.id}' is not answering ({stalled}); retry shortly.")
        return self.runtime

    async def _generate(self, request: GenerationRequest) -> AsyncGenerator[EngineEvent, None]:
        runtime = self._serving()
        runtime.prompts.refuse_surely_too_long(request)
        if self.waiting + 1 > self.config.max_queue + runtime.scheduler.view.free:  # free ones go first
            raise Overloaded("Too many requests are waiting for this model; retry shortly.")
        runtime.check(request)
        constraint = await self._constraint(request)
        runtime = self._serving()  # still: the compile may have taken seconds
        channel: Channel[Delivery] = self._thread.channel(asyncio.get_running_loop())
        ticket = Ticket(channel.send, choices=0)
        with self._requests.holding(ticket, channel):
            if await self._thread.call(lambda: runtime.submit(request, ticket, constraint)):
                async for beat in waiting(channel, ticket, timeout=self.config.queue_timeout, model=self.config.id):
                    yield beat
            async for event in delivered(channel.receive):
                yield event

    async def _constraint(self, request: GenerationRequest) -> Constraint:
        """What holds `request`'s decoding, its schemas compiled on a worker thread (or found in
        `grammars`); a refused one raises here, before any event. A turn to compile is waited for
        no longer than a free sequence would be. A caller that leaves while its schema compiles
        goes once the compile is done (kept for the next request): so no more than `COMPILES` run."""
        if not compiles(request):
            return constraint_for(request)
        timeout = self.config.queue_timeout
        with anyio.move_on_after(timeout) as turn:
            await self._compiling.acquire()
        if turn.cancelled_caught:  # only the wait for a turn is bounded: a compile once begun ends
            raise Overloaded(
                f"This request waited {timeout:g} s to compile its schema for '{self.config.id}'; retry shortly."
            )
        try:
            return await anyio.to_thread.run_sync(lambda: constraint_for(request, grammars=self.grammars))
        finally:
            self._compiling.release()

    def _loading(self, fraction: float) -> None:
        self.progress = fraction
