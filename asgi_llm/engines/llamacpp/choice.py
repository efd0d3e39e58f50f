"""One choice of a generation as the scheduler drives it (`jobs.Choice`): a token picked per
step, turned into text, split into reasoning and answer, cut by stop sequences and the token
budget, and passed through the request's constraint (a document check, tool-call parsing).

Every piece is named state of one object, so that a fault in any of them ends this choice
only (the scheduler catches it) and nothing is left half-advanced in a suspended generator.
"""

from __future__ import annotations

import codecs
from collections import deque
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass

from ...core.events import (
    EngineEvent,
    Finish,
    FinishReason,
    GenerationEvent,
    PromptRead,
    ReasoningDelta,
    TextDelta,
    TokenLogprob,
    Usage,
)
from ...core.requests import SamplingParams
from ..decoding.constraints import Wrap
from ..decoding.reasoning import Reasoned, ReasoningSplitter
from ..decoding.stops import StopMatcher
from .jobs import Turn
from .native import Decoder, Model
from .sampling import Sampling, logprob

__all__ = ["Output", "Tally", "TokenChoice"]


@dataclass
class Tally:
    """Tokens sampled since load, over every choice (read by metrics and tests)."""

    tokens: int = 0


@dataclass(frozen=True)
class Output:
    """What one choice's output is to be: where it shows, how long it may run, and how its
    reasoning block is handled (`splitter` None: no block; `shown` False: dropped; a thinking
    `budget` closes the block with `closing` once that many tokens are spent)."""

    index: int
    params: SamplingParams
    limit: int  # tokens the output may take (its max_tokens, or the room left in the context)
    count_prompt: bool  # whether this choice reports the prompt's size (the first of its prompt)
    echo: str | None = None
    echo_logprobs: tuple[TokenLogprob, ...] = ()
    splitter: ReasoningSplitter | None = None
    shown: bool = True
    budget: int | None = None
    closing: Callable[[], list[int]] = list
    ends: tuple[str, ...] = ()  # text that ends the output as a stop does, reported as an end of turn


class _Feed:
    """The raw events of a choice, handed a step at a time to its constraint's wrap (a
    generator over events, where `None` marks the end of a step)."""

    def __init__(self) -> None:
        self.items: deque[GenerationEvent | None] = deque()
        self.ended = False

    def __iter__(self) -> Iterator[GenerationEvent | None]:
        return self

    def __next__(self) -> GenerationEvent | None:
        if self.items:
            return self.items.popleft()
        if self.ended:
            raise StopIteration
        raise RuntimeError("a constraint read past the end of a step")


class TokenChoice:
    """One choice on one prompt: `begin` once the prompt is read, then `step` per token."""

    def __init__(
        self,
        model: Model,
        decoder: Decoder,
        prompt: list[int],
        sampling: Sampling,
        output: Output,
        *,
        wrap: Wrap,
        tally: Tally,
    ) -> None:
        self._model = model
        self._decoder = decoder
        self.prompt = prompt
        self.sampling = sampling
        self.output = output
        self.utf8 = codecs.getincrementaldecoder("utf-8")("replace")
        self.stops = StopMatcher(output.params.stop + output.ends)
        self.reasoned = Reasoned()
        self.produced = 0
        self.cached = 0
        self._tally = tally
        self._logprobs: list[TokenLogprob] = []  # of tokens whose text has not gone out yet
        self._closing: list[int] = []  # the reasoning block's closing marker, being forced
        self._feed = _Feed()
        self._wrapped = iter(wrap(self._feed))

    def begin(self, cached: int) -> Sequence[EngineEvent]:
        self.cached = cached
        out = self.output
        events: list[EngineEvent] = []
        if out.count_prompt:  # the prompt's size goes out before its first token
            events.append(PromptRead(len(self.prompt), cached, out.index))
        if out.echo:
            events.extend(self._through([TextDelta(out.echo, index=out.index, logprobs=out.echo_logprobs)], False))
        return events

    @property
    def greedy(self) -> bool:
        """Whether its next pick is the plain top logit (no logprobs to read, no marker forced)."""
        return self.sampling.greedy and not self._closing and not self.output.params.logprobs

    def forced(self) -> str:
        """The text its grammar allows alone next, for the scheduler to draft: '' where more than
        one text may follow, none is held, a marker is being forced, or its request opted out."""
        if self._closing or self._feed.ended or not self.output.params.speculative:
            return ""
        return self.sampling.forced()

    def step(self, row: int, top: int | None = None) -> Turn:
        raw, token = self._next(row, top if top is not None and self.greedy else None)
        events = self._through(raw, token is None)
        return Turn(events, None if self._feed.ended else token)

    def close(self) -> None:
        if isinstance(self._wrapped, Generator):
            self._wrapped.close()

    def _through(self, raw: list[GenerationEvent], last: bool) -> list[GenerationEvent]:
        """`raw` passed through the constraint's wrap; past the `last` step, whatever it keeps
        to the end. A wrap that ends early ends the choice (`_feed.ended`)."""
        self._feed.items.extend(raw)
        if last:
            self._feed.ended = True
        else:
            self._feed.items.append(None)
        events: list[GenerationEvent] = []
        for event in self._wrapped:
            if event is None:
                return events
            events.append(event)
        self._feed.ended = True
        return events

    def _next(self, row: int, top: int | None) -> tuple[list[GenerationEvent], int | None]:
        """One token picked from batch row `row` (`top`, where the scheduler picked it): its
        events, and the token (None: done)."""
        out, sampling, model = self.output, self.sampling, self._model
        remaining = out.limit - self.produced
        if remaining <= 0:  # no room for even one token
            return self._finish([], "length"), None
        if self._closing:
            token = sampling.force(self._closing.pop(0))
        elif top is not None:
            token = sampling.take_top(top)
        else:
            token = sampling.sample(row, self._decoder.context, remaining)
        if model.is_end(token):
            return self._finish(
                [], "length" if sampling.cut else "stop"
            ), None  # closed early for its budget: still cut
        self.produced += 1
        self._tally.tokens += 1
        piece = sampling.piece(token)
        if out.params.logprobs:
            self._logprobs.append(logprob(model, self._decoder.logits(row), token, piece, out.params.top_logprobs))
        events: list[GenerationEvent] = []
        text = self._reason(self.utf8.decode(piece), events)
        sampling.saw(text, remaining - 1)
        # A call held to its grammar is not cut by a stop sequence (from the text that begins it), as a forced one is not.
        text = self.stops.flush() + text if sampling.held_call() else self.stops.feed(text)
        if self.stops.matched is not None:
            if text or self._logprobs:
                events.append(self._text(text))
            return self._finish(events, "stop"), None
        if text:
            events.append(self._text(text))
        if self.produced < out.limit:
            return events, token
        return self._finish(events, "length"), None

    def _reason(self, text: str, events: list[GenerationEvent]) -> str:
        """The answer part of `text`; its reasoning part goes out as a `ReasoningDelta`."""
        splitter, out = self.output.splitter, self.output
        if splitter is None:
            return text
        thought, text = splitter.feed(text)
        self.reasoned.count(splitter)
        if out.budget is not None and splitter.reasoning and self.reasoned.tokens >= out.budget and not self._closing:
            self._closing = out.closing()
        if thought and out.shown:
            events.append(ReasoningDelta(thought, index=out.index))
        if splitter.in_block:
            self._logprobs = []  # the tokens of reasoning and its markers have no logprobs to report
        return text

    def _text(self, text: str) -> TextDelta:
        logprobs, self._logprobs = tuple(self._logprobs), []
        return TextDelta(text, index=self.output.index, logprobs=logprobs)

    def _finish(self, events: list[GenerationEvent], reason: FinishReason) -> list[GenerationEvent]:
        """What is held back goes out (undecoded bytes, a partial stop or marker), then `Finish`."""
        out = self.output
        if self.stops.matched is None:
            rest = self.utf8.decode(b"", final=True)
            if out.splitter is not None:
                thought, rest = out.splitter.feed(rest)
                last = out.splitter.finish()
                thought, rest = thought + last.reasoning, rest + last.answer
                if thought and out.shown:
                    events.append(ReasoningDelta(thought, index=out.index))
            rest = self.stops.feed(rest)
            if self.stops.matched is None:
                rest += self.stops.flush()
            if rest or self._logprobs:
                events.append(self._text(rest))
        usage = Usage(
            prompt_tokens=len(self.prompt) if out.count_prompt else 0,
            completion_tokens=self.produced,
            cached_tokens=self.cached if out.count_prompt else 0,
            reasoning_tokens=self.reasoned.tokens,
        )
        stopped = self.stops.matched if self.stops.matched in out.params.stop else None
        events.append(Finish(reason, usage, index=out.index, stop_sequence=stopped))
        return events
