"""An upstream's streamed chunks as core events. Pure: fed decoded SSE data, returns events.

Chat chunks (`choices[].delta`) and completion chunks (`choices[].text`) alike. Reasoning comes
from `delta.reasoning_content` (DeepSeek, llama.cpp's server), `delta.reasoning` (vLLM, OpenRouter)
or a `<think>` block opening the text. Tool calls arrive as deltas keyed by `index`: a call
starts once its name is known, arguments stream after it, and every open call ends when its
choice finishes. Each choice's `Finish` waits for the end of the stream, where the usage chunk
(`stream_options.include_usage`) has arrived; the request's usage goes on the first choice, as
the core's convention has it. An upstream that reports no usage gets an estimate: the prompt
from its text, each choice's output as one token per content chunk (llama.cpp-family servers
send one chunk per token).

Stop sequences are matched here, on the text as it arrives (the upstream is not sent them: its
`finish_reason` would not say which one matched, nor whether one did); a choice that meets one
ends there, with that stop on its `Finish`. A stream that must open with the prompt's size gets
`PromptRead` before its first event: the size counted beforehand, or else the first usage
chunk's, everything held back until it comes.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ...core.events import (
    EngineEvent,
    Finish,
    FinishReason,
    GenerationEvent,
    PromptRead,
    ReasoningDelta,
    TextDelta,
    TokenLogprob,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    TopLogprob,
    Usage,
)
from ...core.requests import ChatRequest, GenerationRequest
from ..decoding.reasoning import ReasoningSplitter
from ..decoding.stops import StopMatcher
from .wire import choice_count, estimate_prompt_tokens

__all__ = ["ChunkTranslator", "SSEDecoder", "translator_for", "usage_of"]

_REASONS: dict[str, FinishReason] = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
}


class SSEDecoder:
    """Server-sent events, line by line: `line()` returns an event's data once its blank line arrives."""

    def __init__(self) -> None:
        self._data: list[str] = []

    def line(self, line: str) -> str | None:
        if not line:
            return self.flush()
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        if name == "data":
            self._data.append(value.removeprefix(" "))
        return None

    def flush(self) -> str | None:
        """The data of an event whose blank line never came (the stream ended)."""
        if not self._data:
            return None
        data, self._data = "\n".join(self._data), []
        return data


@dataclass
class _Call:
    id: str
    name: str = ""
    arguments: str = ""
    started: bool = False


@dataclass
class _Choice:
    splitter: ReasoningSplitter = field(default_factory=ReasoningSplitter)
    calls: dict[int, _Call] = field(default_factory=dict)
    chunks: int = 0
    reason: str | None = None
    logprobs: list[TokenLogprob] = field(default_factory=list)
    stops: StopMatcher = field(default_factory=lambda: StopMatcher(()))
    stopped: str | None = None  # the stop sequence it met here


class ChunkTranslator:
    """One request's stream. `feed(chunk)` per decoded chunk; `finish()` once the stream ends."""

    def __init__(
        self,
        choices: int,
        *,
        request_id: str,
        prompt_estimate: int,
        stops: tuple[str, ...] = (),
        prompt: int | None = None,
        hold: bool = False,
    ) -> None:
        """`prompt`: the prompt's size, known beforehand (sent first); `hold`: without it, hold
        the events back until a usage chunk says it."""
        self._expected = choices
        self._rid = request_id
        self._estimate = prompt if prompt is not None else prompt_estimate
        self._stops = stops
        self._choices: dict[int, _Choice] = {}
        self._opening: list[EngineEvent] = [PromptRead(prompt)] if prompt is not None else []
        self._hold = hold and prompt is None
        self._held: list[EngineEvent] = []
        self.usage: Usage | None = None

    @property
    def finished(self) -> bool:
        """Whether every choice has said why it stopped."""
        return len(self._choices) >= self._expected and all(c.reason for c in self._choices.values())

    @property
    def cut(self) -> bool:
        """Every choice has ended, one at a stop sequence: the upstream's rest is not wanted."""
        return self.finished and any(c.stopped for c in self._choices.values())

    def feed(self, chunk: Mapping[str, Any]) -> list[EngineEvent]:
        usage = chunk.get("usage")
        if isinstance(usage, Mapping):
            self.usage = usage_of(usage)
        events: list[EngineEvent] = []
        for raw in chunk.get("choices") or ():
            if isinstance(raw, Mapping):
                events += self._choice(raw)
        return self._release(events, end=False)

    def finish(self) -> list[EngineEvent]:
        events: list[EngineEvent] = []
        for index in sorted(set(range(self._expected)) | set(self._choices)):
            choice = self._choices.setdefault(index, self._new_choice())
            events += self._flush(index, choice)
        usages = self._usages()
        for index, usage in zip(sorted(self._choices), usages):
            choice = self._choices[index]
            reason = _REASONS.get(choice.reason or "stop", "stop")
            if choice.calls and reason == "stop":
                reason = "tool_calls"
            events.append(Finish(reason, usage, index=index, stop_sequence=choice.stopped))
        return self._release(events, end=True)

    def _release(self, events: list[EngineEvent], *, end: bool) -> list[EngineEvent]:
        """`events`, after the prompt's size where it goes first; held while it is not known."""
        if self._hold:
            self._held += events
            if self.usage is None and not end:
                return []
            self._hold, events, self._held = False, self._held, []
            usage = self.usage or Usage(self._estimate, 0)
            self._opening = [PromptRead(usage.prompt_tokens, cached=usage.cached_tokens)]
        if events and self._opening:
            events, self._opening = [*self._opening, *events], []
        return events

    def _usages(self) -> list[Usage]:
        indexes = sorted(self._choices)
        if self.usage is not None:
            return [self.usage if i == 0 else Usage(0, 0) for i, _ in enumerate(indexes)]
        counted = [self._choices[i].chunks for i in indexes]
        return [Usage(self._estimate if n == 0 else 0, c) for n, c in enumerate(counted)]

    def _choice(self, raw: Mapping[str, Any]) -> list[GenerationEvent]:
        index = raw.get("index", 0)
        index = index if isinstance(index, int) else 0
        choice = self._choices.setdefault(index, self._new_choice())
        if choice.stopped is not None:
            return []  # what the upstream made past a stop sequence
        delta = raw.get("delta")
        delta = delta if isinstance(delta, Mapping) else {}
        events: list[GenerationEvent] = []
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if isinstance(reasoning, str) and reasoning:
            events.append(ReasoningDelta(reasoning, index=index))
        text = delta.get("content") if "text" not in raw else raw.get("text")
        choice.logprobs += _logprobs(raw.get("logprobs"))
        if isinstance(text, str) and text:
            events += self._text(index, choice, text)
            if choice.stopped is not None:
                choice.chunks += 1
                return events
        for call in delta.get("tool_calls") or ():
            if isinstance(call, Mapping):
                events += self._call(index, choice, call)
        if (isinstance(text, str) and text) or reasoning or delta.get("tool_calls"):
            choice.chunks += 1
        reason = raw.get("finish_reason")
        if isinstance(reason, str) and reason:
            choice.reason = reason
            events += self._flush(index, choice)
        return events

    def _text(self, index: int, choice: _Choice, text: str) -> list[GenerationEvent]:
        thought, answer = choice.splitter.feed(text)
        events: list[GenerationEvent] = [ReasoningDelta(thought, index=index)] if thought else []
        answer = self._unstopped(choice, choice.stops.feed(answer))
        if answer or (choice.stopped and choice.logprobs):
            events.append(TextDelta(answer, index=index, logprobs=tuple(choice.logprobs)))
            choice.logprobs = []
        return events

    def _new_choice(self) -> _Choice:
        return _Choice(stops=StopMatcher(self._stops))

    @staticmethod
    def _unstopped(choice: _Choice, answer: str) -> str:
        """`answer` as the stop matcher let it through; a match ends the choice there."""
        if choice.stops.matched is not None and choice.stopped is None:
            choice.stopped, choice.reason = choice.stops.matched, "stop"
        return answer

    def _call(self, index: int, choice: _Choice, raw: Mapping[str, Any]) -> list[GenerationEvent]:
        call_index = raw.get("index", len(choice.calls))
        call_index = call_index if isinstance(call_index, int) else len(choice.calls)
        call = choice.calls.setdefault(call_index, _Call(id=f"call_{self._rid}_{index}_{call_index}"))
        function = raw.get("function")
        function = function if isinstance(function, Mapping) else {}
        if isinstance(raw.get("id"), str) and raw["id"] and not call.started:
            call.id = raw["id"]
        if isinstance(function.get("name"), str) and not call.started:
            call.name += function["name"]
        arguments = function.get("arguments")
        call.arguments += arguments if isinstance(arguments, str) else ""
        if not call.started and call.name:
            call.started = True
            pending, call.arguments = call.arguments, ""
            start: list[GenerationEvent] = [ToolCallStart(call.id, call.name, index=index, call_index=call_index)]
            return start + ([ToolCallDelta(pending, index=index, call_index=call_index)] if pending else [])
        if call.started and call.arguments:
            pending, call.arguments = call.arguments, ""
            return [ToolCallDelta(pending, index=index, call_index=call_index)]
        return []

    def _flush(self, index: int, choice: _Choice) -> list[GenerationEvent]:
        """What a finished choice still holds: text the reasoning splitter kept back, open calls' ends."""
        rest, stopped = choice.splitter.finish(), choice.stopped is not None
        events: list[GenerationEvent] = (
            [ReasoningDelta(rest.reasoning, index=index)] if rest.reasoning and not stopped else []
        )
        answer = "" if stopped else self._unstopped(choice, choice.stops.feed(rest.answer))
        answer += "" if choice.stopped else choice.stops.flush()
        if answer or choice.logprobs:
            events.append(TextDelta(answer, index=index, logprobs=tuple(choice.logprobs)))
            choice.logprobs = []
        for call_index, call in sorted(choice.calls.items()):
            if call.started and call.id:
                events.append(ToolCallEnd(index=index, call_index=call_index))
                call.id = ""  # ended; kept so the choice still counts as having called
        return events


def translator_for(request: GenerationRequest, prompt: int | None) -> ChunkTranslator:
    """The translator of `request`'s stream, `prompt` its size where counted beforehand."""
    hold = isinstance(request, ChatRequest) and request.prompt_size_first
    estimate, stops = estimate_prompt_tokens(request), request.sampling.stop
    rid = uuid.uuid4().hex[:12]
    return ChunkTranslator(
        choice_count(request), request_id=rid, prompt_estimate=estimate, stops=stops, prompt=prompt, hold=hold
    )


def usage_of(raw: Mapping[str, Any]) -> Usage:
    """An OpenAI `usage` object, with `prompt_tokens_details.cached_tokens` and
    `completion_tokens_details.reasoning_tokens` where given."""
    prompt_details, completion_details = raw.get("prompt_tokens_details"), raw.get("completion_tokens_details")
    cached = prompt_details.get("cached_tokens") if isinstance(prompt_details, Mapping) else None
    reasoning = completion_details.get("reasoning_tokens") if isinstance(completion_details, Mapping) else None
    return Usage(
        prompt_tokens=_count(raw.get("prompt_tokens")),
        completion_tokens=_count(raw.get("completion_tokens")),
        cached_tokens=_count(cached),
        reasoning_tokens=_count(reasoning),
    )


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _logprobs(raw: Any) -> list[TokenLogprob]:
    """Chat-style `logprobs.content` entries (completions' older shape is not carried)."""
    content = raw.get("content") if isinstance(raw, Mapping) else None
    return [_logprob(entry) for entry in content or () if isinstance(entry, Mapping)]


def _logprob(entry: Mapping[str, Any]) -> TokenLogprob:
    top = tuple(
        TopLogprob(str(t.get("token", "")), float(t.get("logprob", 0.0)), _bytes(t))
        for t in entry.get("top_logprobs") or ()
    )
    return TokenLogprob(str(entry.get("token", "")), float(entry.get("logprob", 0.0)), _bytes(entry), top)


def _bytes(entry: Mapping[str, Any]) -> bytes:
    raw = entry.get("bytes")
    if isinstance(raw, list):
        return bytes(b for b in raw if isinstance(b, int) and 0 <= b < 256)
    return str(entry.get("token", "")).encode("utf-8")
