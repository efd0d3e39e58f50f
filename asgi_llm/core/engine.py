"""The contract between the pool and whatever runs a model."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from .events import EmbeddingResult, EngineEvent
from .memory import MemoryEstimate
from .ranking import LoraAdapters, RerankRequest, RerankResult
from .requests import ChatRequest, EmbeddingRequest, GenerationRequest

__all__ = [
    "Embedder",
    "Engine",
    "EngineHealth",
    "ImageReader",
    "LoraOwner",
    "Reranker",
    "Tokenizer",
    "TokenizerOwner",
]


@dataclass(frozen=True)
class EngineHealth:
    """Whether a fresh request can be served now, the faults an engine survived since load, and
    its speculative decoding's tally (tokens drafted, and those its choices picked)."""

    stalled: str | None = None
    """Why a fresh request cannot be served now (work made no progress); None while it can."""
    faults: int = 0  # requests ended by a fault on the engine's side, the others going on
    stalls: int = 0  # times queued or running work made no progress for `stall_seconds`
    restarts: int = 0  # times the model restarted in place, after a stall or a broken invariant
    drafted: int = 0  # tokens decoded as drafts to verify (speculative decoding)
    accepted: int = 0  # of those, the ones picked: each saved a decode
    recalled: int = 0  # of `drafted`, the tokens recalled from the model's memory of past replies
    recalled_accepted: int = 0  # of those, the ones picked
    remembered: int = 0  # runs of past replies the memory holds now


class Tokenizer(Protocol):
    """A loaded model's vocabulary and chat template, asked without decoding (llama-server's
    `/tokenize`, `/detokenize` and `/apply-template`). Errors are raised as `LLMError`s."""

    async def tokenize(self, text: str, *, add_special: bool, parse_special: bool) -> list[int]:
        """`add_special`: what the model's tokenizer adds at the ends (a BOS, where its vocabulary
        says to); `parse_special`: control tokens written in the text are read as themselves."""
        ...

    async def pieces(self, tokens: Sequence[int]) -> list[bytes]:
        """Each token's bytes, control tokens written out; an id outside the vocabulary is an
        `InvalidRequest` naming `tokens[i]`."""
        ...

    async def render_chat(self, request: ChatRequest) -> str:
        """The text `generate` would tokenize for `request`: the same rendering, to the byte."""
        ...


@runtime_checkable
class Engine(Protocol):
    """Runs one model: what every engine has. Errors are raised as `asgi_llm.core.errors.LLMError`.

    What only some engines can do is a protocol of its own below (`Embedder`, `Reranker`,
    `TokenizerOwner`, `LoraOwner`), which an engine declares by subclassing it and the endpoint
    checks by type where a route needs it: no engine implements an ability to refuse it.

    The pool reads `progress`, `waiting`, `memory`, `health()` and `describe()` from the event
    loop: they answer at once (a plain attribute satisfies a read-only property here).

    `generate` raises request errors (context overflow, bad params) on the first
    `__anext__`, before any event, so a server can still answer with an error status.
    Closing the iterator early cancels the generation.
    """

    @property
    def context_length(self) -> int: ...

    @property
    def progress(self) -> float:
        """How far a load has read the weights, 0 to 1 (read while it loads, for /health)."""
        ...

    @property
    def waiting(self) -> int:
        """Requests queued behind those being generated (for metrics); 0 where nothing queues here."""
        ...

    @property
    def memory(self) -> MemoryEstimate | None:
        """What the loaded model holds (llama.cpp's allocations, per GPU), for the model lists;
        None before a load, or where nothing is held here (an upstream)."""
        ...

    def health(self) -> EngineHealth:
        """Read from the event loop by /health, the model list and metrics."""
        ...

    def describe(self) -> Mapping[str, Any]:
        """What the engine got at load (backend, GPU offload, context...), for health output."""
        ...

    async def load(self) -> None: ...

    async def close(self) -> None: ...

    def generate(self, request: GenerationRequest) -> AsyncGenerator[EngineEvent, None]: ...

    async def count_tokens(self, request: GenerationRequest) -> int:
        """Prompt tokens the request would use (chat template applied); raises like `generate`."""
        ...


@runtime_checkable
class Embedder(Protocol):
    """An engine that embeds text. A model serves embeddings where its engine is one and its
    config says `embeddings = true`."""

    async def embed(self, request: EmbeddingRequest) -> EmbeddingResult: ...


@runtime_checkable
class Reranker(Protocol):
    """An engine that scores documents against a query for `/rerank` (its model's classifier, or
    a chat model judging each)."""

    async def rerank(self, request: RerankRequest) -> RerankResult:
        """Each document's relevance to the query."""
        ...


@runtime_checkable
class TokenizerOwner(Protocol):
    """An engine whose model's vocabulary and chat template can be asked here (`/tokenize`,
    `/detokenize`, `/apply-template`)."""

    def tokenizer(self) -> Tokenizer:
        """The loaded model's tokenizer; raises `ModelNotReady` while the model cannot serve."""
        ...


@runtime_checkable
class LoraOwner(Protocol):
    """An engine that applies LoRA adapters, whose default scales `/lora-adapters` lists and sets."""

    def adapters(self) -> LoraAdapters: ...


@runtime_checkable
class ImageReader(Protocol):
    """An engine that may take images in chat messages (`Message.images`): a local model with a
    projector (`mmproj`), or an upstream that is sent them as the client sent them. A request with
    images for any other engine, or while `reads_images` is False, is a 400 naming the part."""

    @property
    def reads_images(self) -> bool:
        """Whether this engine's model takes images (a local one: once its projector is set)."""
        ...
