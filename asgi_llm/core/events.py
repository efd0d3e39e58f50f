"""The stream an engine yields while generating; adapters encode it per protocol."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "Embedding",
    "EmbeddingResult",
    "EngineEvent",
    "Finish",
    "FinishReason",
    "GenerationEvent",
    "PromptRead",
    "Queued",
    "ReasoningDelta",
    "TextDelta",
    "TokenLogprob",
    "TokenizerResult",
    "ToolCallDelta",
    "ToolCallEnd",
    "ToolCallStart",
    "TopLogprob",
    "Usage",
    "total_usage",
]

FinishReason = Literal["stop", "length", "tool_calls"]


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0
    """Of `prompt_tokens`, those found in the cache."""
    reasoning_tokens: int = 0
    """Of `completion_tokens`, those the model spent reasoning (its think block and markers)."""

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True)
class TopLogprob:
    token: str
    logprob: float
    bytes: bytes


@dataclass(frozen=True)
class TokenLogprob:
    token: str
    logprob: float | None
    """None for a prompt's first token, which nothing precedes (echoed prompts only)."""
    bytes: bytes
    top: tuple[TopLogprob, ...] = ()


@dataclass(frozen=True)
class TextDelta:
    """New output text for choice `index`; `logprobs` cover the tokens behind it."""

    text: str
    index: int = 0
    logprobs: tuple[TokenLogprob, ...] = ()


@dataclass(frozen=True)
class ReasoningDelta:
    """Thinking text for choice `index`, from models that reason before answering."""

    text: str
    index: int = 0


@dataclass(frozen=True)
class ToolCallStart:
    """Choice `index` begins its `call_index`-th tool call."""

    id: str
    name: str
    index: int = 0
    call_index: int = 0


@dataclass(frozen=True)
class ToolCallDelta:
    """A fragment of the call's JSON arguments; the fragments concatenate to a JSON object."""

    arguments: str
    index: int = 0
    call_index: int = 0


@dataclass(frozen=True)
class ToolCallEnd:
    index: int = 0
    call_index: int = 0


@dataclass(frozen=True)
class Finish:
    """Choice `index` is complete.

    A prompt's tokens are counted on the first choice made from it only, so that
    summing `usage` over choices gives the request's usage.
    """

    reason: FinishReason
    usage: Usage
    index: int = 0
    stop_sequence: str | None = None


GenerationEvent = TextDelta | ReasoningDelta | ToolCallStart | ToolCallDelta | ToolCallEnd | Finish


@dataclass(frozen=True)
class PromptRead:
    """Choice `index`'s prompt is read: `tokens` of it, `cached` of those from the cache. An
    engine that knows sends it before the choice's first token, so a stream can open with the
    prompt's size (Anthropic's `message_start`); `Finish.usage` stays the account."""

    tokens: int
    cached: int = 0
    index: int = 0


@dataclass(frozen=True)
class Queued:
    """The request waits for the model to be free: sent at once and every few seconds while it
    waits (`waited` seconds so far), so a stream can send its headers and keep-alives instead
    of silence."""

    waited: float = 0.0


EngineEvent = GenerationEvent | PromptRead | Queued
"""What an engine yields: the generation, and where it knows them early, prompt reads and waits."""


@dataclass(frozen=True)
class Embedding:
    vector: tuple[float, ...]
    tokens: int


@dataclass(frozen=True)
class EmbeddingResult:
    embeddings: tuple[Embedding, ...]

    @property
    def prompt_tokens(self) -> int:
        return sum(e.tokens for e in self.embeddings)


@dataclass(frozen=True)
class TokenizerResult:
    """What a tokenizer request got: token ids, with each one's bytes where asked (a piece may be
    part of a UTF-8 character; control tokens are written out), and the model's context length;
    or the prompt a chat template rendered."""

    tokens: tuple[int, ...] = ()
    pieces: tuple[bytes, ...] = ()
    context_length: int = 0
    prompt: str = ""


def total_usage(finishes: Iterable[Finish]) -> Usage:
    """One request's usage across its choices: the prompt counts once."""
    prompt = completion = cached = reasoning = 0
    for finish in finishes:
        prompt += finish.usage.prompt_tokens
        completion += finish.usage.completion_tokens
        cached += finish.usage.cached_tokens
        reasoning += finish.usage.reasoning_tokens
    return Usage(prompt, completion, cached, reasoning)
