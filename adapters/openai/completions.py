"""OpenAI (legacy) Completions: `POST /completions`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, cast

from pydantic import Field

from asgi_llm.core import (
    CompletionRequest,
    Finish,
    GenerationEvent,
    InvalidRequest,
    LLMError,
    TextDelta,
    TokenLogprob,
    Unsupported,
    total_usage,
)

from ..base import GenerateRoute, Meta, Parsed, Unrecorded, refuse_unrecognized
from .common import (
    MAX_CHOICES,
    SSE_DONE,
    SamplingBody,
    adapter_scales,
    render_error,
    sampling_params,
    sse,
    stop_problem,
    stream_flags,
    tag_error,
    texts_or_tokens_problem,
    usage_dict,
    validated,
)

__all__ = ["ROUTE", "CompletionStream", "parse", "render"]

Prompt = str | list[str] | list[int] | list[list[int]]


class CompletionBody(SamplingBody):
    prompt: Prompt
    max_tokens: Annotated[int, Field(ge=0)] | None = 16
    """16 where not sent (null counts as not sent: `Wire`), as OpenAI's default."""
    logprobs: Annotated[int, Field(ge=0, le=5)] | None = None
    echo: bool | None = None
    suffix: str | None = None
    best_of: Annotated[int, Field(ge=1)] | None = None


@dataclass(frozen=True)
class CompletionOptions:
    include_usage: bool = False
    logprobs: int | None = None


def parse(body: Any) -> Parsed[CompletionRequest, CompletionOptions]:
    wire = validated(CompletionBody, body, prompt=texts_or_tokens_problem, stop=stop_problem)
    if wire.suffix:
        raise Unsupported("'suffix' (insertion) is not supported.", param="suffix")
    if wire.best_of is not None and wire.best_of != (wire.n or 1):
        raise Unsupported("'best_of' other than 'n' is not supported.", param="best_of")
    if wire.grammar and wire.echo:
        raise Unsupported("'echo' is not supported with 'grammar'.", param="echo")
    refuse_unrecognized(wire)
    prompts = _prompts(wire.prompt)
    _check_choices(len(prompts), wire.n or 1)
    stream, include_usage = stream_flags(wire)
    if wire.max_tokens == 0 and not wire.echo:
        raise InvalidRequest("'max_tokens' must be at least 1 unless 'echo' is set.", param="max_tokens")
    sampling = sampling_params(
        wire, max_tokens=wire.max_tokens, logprobs=wire.logprobs is not None, top_logprobs=wire.logprobs or 0
    )
    request = CompletionRequest(
        model=wire.model,
        prompts=prompts,
        sampling=sampling,
        n=wire.n or 1,
        echo=bool(wire.echo),
        user=wire.user,
        adapters=adapter_scales(wire.lora),
    )
    return Parsed(request, CompletionOptions(include_usage, wire.logprobs), stream=stream)


def _check_choices(prompts: int, n: int) -> None:
    """One choice per prompt × `n`, held to the bound chat's `n` has."""
    if prompts * n > MAX_CHOICES:
        param = "prompt" if n == 1 else "n"
        raise InvalidRequest(
            f"A completion makes at most {MAX_CHOICES} choices (prompts × n); this one asks for "
            f"{prompts} × {n} = {prompts * n}.",
            param=param,
        )


def _prompts(prompt: Prompt) -> tuple[str | tuple[int, ...], ...]:
    if isinstance(prompt, str):
        return (prompt,)
    if not prompt:
        raise InvalidRequest("'prompt' must not be empty.", param="prompt")
    if all(isinstance(p, int) for p in prompt):
        return (tuple(cast(list[int], prompt)),)
    return tuple(p if isinstance(p, str) else tuple(cast(list[int], p)) for p in prompt)


def completion_logprobs(tokens: Sequence[TokenLogprob], offset: int) -> dict[str, Any]:
    offsets = []
    for t in tokens:
        offsets.append(offset)
        offset += len(t.token)
    return {
        "tokens": [t.token for t in tokens],
        "token_logprobs": [t.logprob for t in tokens],
        "top_logprobs": [None if t.logprob is None else {o.token: o.logprob for o in t.top} for t in tokens],
        "text_offset": offsets,
    }


def render(
    parsed: Parsed[CompletionRequest, CompletionOptions], meta: Meta, events: Sequence[GenerationEvent]
) -> dict[str, Any]:
    count = len(parsed.request.prompts) * parsed.request.n
    texts: list[list[str]] = [[] for _ in range(count)]
    logprobs: list[list[TokenLogprob]] = [[] for _ in range(count)]
    finishes: dict[int, Finish] = {}
    for event in events:
        if isinstance(event, TextDelta):
            texts[event.index].append(event.text)
            logprobs[event.index].extend(event.logprobs)
        elif isinstance(event, Finish):
            finishes[event.index] = event
    choices = []
    for i in range(count):
        text = "".join(texts[i])
        echoed = len(text) - sum(len(t.token) for t in logprobs[i]) if parsed.request.echo else 0
        choices.append(
            {
                "index": i,
                "text": text,
                "logprobs": completion_logprobs(logprobs[i], max(echoed, 0))
                if parsed.request.sampling.logprobs
                else None,
                "finish_reason": finishes[i].reason if i in finishes else "stop",
            }
        )
    return {
        "id": f"cmpl-{meta.request_id}",
        "object": "text_completion",
        "created": meta.created,
        "model": meta.model,
        "choices": choices,
        "usage": usage_dict(total_usage(finishes.values())),
    }


class CompletionStream(Unrecorded):
    media_type = "text/event-stream"

    def __init__(self, parsed: Parsed[CompletionRequest, CompletionOptions], meta: Meta) -> None:
        self._meta = meta
        options = parsed.options
        self._include_usage = options.include_usage
        self._logprobs = parsed.request.sampling.logprobs
        self._offsets: dict[int, int] = {}
        self._finishes: list[Finish] = []

    def _chunk(self, choice: dict[str, Any] | None) -> bytes:
        chunk: dict[str, Any] = {
            "id": f"cmpl-{self._meta.request_id}",
            "object": "text_completion",
            "created": self._meta.created,
            "model": self._meta.model,
            "choices": [choice] if choice else [],
        }
        if self._include_usage:
            chunk["usage"] = None
        return sse(chunk)

    def open(self) -> bytes:
        return b""

    def event(self, event: GenerationEvent) -> bytes:
        if isinstance(event, Finish):
            self._finishes.append(event)
            return self._chunk({"index": event.index, "text": "", "logprobs": None, "finish_reason": event.reason})
        if not isinstance(event, TextDelta):
            return b""  # raw completions carry no reasoning channel
        offset = self._offsets.get(event.index, 0)
        self._offsets[event.index] = offset + len(event.text)
        logprobs = completion_logprobs(event.logprobs, offset) if self._logprobs else None
        return self._chunk({"index": event.index, "text": event.text, "logprobs": logprobs, "finish_reason": None})

    def close(self) -> bytes:
        if not self._include_usage:
            return SSE_DONE
        chunk = {
            "id": f"cmpl-{self._meta.request_id}",
            "object": "text_completion",
            "created": self._meta.created,
            "model": self._meta.model,
            "choices": [],
            "usage": usage_dict(total_usage(self._finishes)),
        }
        return sse(chunk) + SSE_DONE

    def error(self, error: LLMError) -> bytes:
        body = render_error(error)[1]
        return sse(tag_error(body, self._meta.trace) if self._meta.trace else body)


ROUTE = GenerateRoute(path="/completions", parse=parse, render=render, encoder=CompletionStream, body=CompletionBody)
