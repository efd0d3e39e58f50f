"""A scripted engine for fast tests of everything around the model (like httpx's MockTransport)."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Sequence
from typing import Any, Protocol

from ..config import ModelConfig
from ..core import (
    ChatRequest,
    EmbeddingRequest,
    EmbeddingResult,
    EngineEvent,
    Finish,
    FinishReason,
    GenerationRequest,
    InvalidRequest,
    LLMError,
    PromptRead,
    RerankRequest,
    RerankResult,
    TextDelta,
    Usage,
)
from ..core.engine import Embedder, EngineHealth, ImageReader, Reranker, TokenizerOwner
from ..core.events import Embedding
from ..core.memory import MemoryEstimate
from .inference_thread import InferenceThread

__all__ = ["FakeEngine"]


class _Gate(Protocol):
    """What `load` waits for: an `anyio.Event`, or anything else with an awaitable `wait()`."""

    def wait(self) -> Awaitable[object]: ...


class FakeEngine(Embedder, Reranker, TokenizerOwner, ImageReader):
    """Replies with `pieces` for every choice; `loaded` gates `load()`; `error` is raised instead.
    It embeds, reranks and tokenizes (scripted); it has no LoRA adapters. With `images` it takes
    images (and ignores them); `requests` keeps what each generation was asked, as it was asked."""

    def __init__(
        self,
        config: ModelConfig,
        thread: InferenceThread | None = None,
        *,
        pieces: Sequence[str] = ("Hello", " there"),
        error: LLMError | None = None,
        loaded: _Gate | None = None,
        images: bool = False,
    ) -> None:
        self.config = config
        self.pieces = tuple(pieces)
        self.error = error
        self._loaded = loaded
        self._images = images
        self.requests: list[GenerationRequest] = []
        self.closed = False
        self.state = EngineHealth()
        """What `health` reports: set it to a stalled one to see how the rest reacts."""
        self.progress = 0.0  # how far `load` has got, as /health shows it: set it from a slow load
        self.waiting = 0  # requests queued, as metrics show them
        self.memory: MemoryEstimate | None = None  # what the model lists show it holds once loaded

    @property
    def reads_images(self) -> bool:
        return self._images

    @property
    def context_length(self) -> int:
        return self.config.n_ctx

    def health(self) -> EngineHealth:
        return self.state

    def describe(self) -> dict[str, Any]:
        return {}

    async def load(self) -> None:
        if self._loaded is not None:
            await self._loaded.wait()

    async def close(self) -> None:
        self.closed = True

    def generate(self, request: GenerationRequest) -> AsyncGenerator[EngineEvent, None]:
        return self._events(request)

    async def _events(self, request: GenerationRequest) -> AsyncGenerator[EngineEvent, None]:
        self.requests.append(request)
        if self.error is not None:
            raise self.error
        limit = request.sampling.max_tokens or len(self.pieces)
        pieces = self.pieces[:limit]
        for index in range(request.n):
            if index == 0:
                yield PromptRead(tokens=3, index=index)  # as the local engine tells it, before any token
            for piece in pieces:
                yield TextDelta(piece, index=index)
            reason: FinishReason = "length" if limit < len(self.pieces) else "stop"
            yield Finish(
                reason, Usage(prompt_tokens=3 if index == 0 else 0, completion_tokens=len(pieces)), index=index
            )

    async def count_tokens(self, request: GenerationRequest) -> int:
        return 3

    async def embed(self, request: EmbeddingRequest) -> EmbeddingResult:
        return EmbeddingResult(tuple(Embedding((1.0, 0.0), tokens=1) for _ in request.inputs))

    async def rerank(self, request: RerankRequest) -> RerankResult:
        """The share of the query's words each document has: scripted, not judged."""
        words = set(request.query.lower().split())
        scores = tuple(len(words & set(d.lower().split())) / max(len(words), 1) for d in request.documents)
        return RerankResult(scores, sum(len(d.split()) for d in request.documents))

    def tokenizer(self) -> ByteTokenizer:
        return ByteTokenizer()


class ByteTokenizer:
    """Each UTF-8 byte is a token, its value the id; `BOS` is `<s>`: put first by `add_special`,
    and read from the text with `parse_special`."""

    BOS = 256

    async def tokenize(self, text: str, *, add_special: bool, parse_special: bool) -> list[int]:
        tokens = [self.BOS] if add_special else []
        for i, part in enumerate(text.split("<s>") if parse_special else [text]):
            tokens += [self.BOS] * (i > 0) + list(part.encode("utf-8"))
        return tokens

    async def pieces(self, tokens: Sequence[int]) -> list[bytes]:
        for i, token in enumerate(tokens):
            if not 0 <= token <= self.BOS:
                raise InvalidRequest(f"Token id {token} is not in this vocabulary.", param=f"tokens[{i}]")
        return [b"<s>" if token == self.BOS else bytes([token]) for token in tokens]

    async def render_chat(self, request: ChatRequest) -> str:
        return "".join(f"<{m.role}>{m.content}\n" for m in request.messages) + "<assistant>"
