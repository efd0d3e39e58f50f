"""Calls begun in free text (`tool_choice: auto`) once their grammar holds them, turned into
call events as they are decoded. Pure.

From the point a call begins, decoding holds the rest of the output to calls (`tool_detect.
trigger_grammar`): the text is no longer free, and a call cannot turn out to be text after
all. Where the sampler also saw room for the call to end within its token budget, each call's
arguments stream as they are written, read by the forced calls' scanner (`call_stream.py`):
`ToolCallStart` once its name is written and its arguments begin, a `ToolCallDelta` per piece,
`ToolCallEnd` once its object is complete and checked. The pieces are the model's own text of
the arguments, so they concatenate to exactly the arguments the call reports.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace

from ...core.errors import InternalError
from ...core.events import Finish, GenerationEvent, TextDelta, ToolCallDelta, ToolCallEnd, ToolCallStart
from .call_stream import CallBegun, CallDone, CallScanner, CallText
from .checks import Validator
from .tool_calls import Repeats, checked_call

__all__ = ["HeldCalls"]

KEYS = ("arguments", "parameters")
"""The keys a call's arguments may go under (Llama 3 writes "parameters")."""


class HeldCalls:
    """The calls of one choice's output from the first one's `opening` marker on ("" for a bare
    call; the text after it is fed), their objects at JSON nesting `level` (`tool_detect.call_level`).

    As for forced calls, a call to a tool already called is held until complete, since it may
    repeat an earlier call; a repeat is not sent, nor any call after it (decoding ends the output
    there). Without `parallel` only the first call is sent. `first` is the call index to begin at.
    """

    def __init__(
        self,
        opening: str,
        level: int,
        checks: Mapping[str, Validator],
        new_id: Callable[[], str],
        *,
        parallel: bool,
        repeats: Repeats,
        first: int = 0,
    ) -> None:
        self._scanner = CallScanner(level, KEYS)
        self._checks = checks
        self._new_id = new_id
        self._parallel = parallel
        self._repeats = repeats
        self._opening = [opening]  # the text so far, while no call has been sent: an unfinished call is text
        self._named: set[str] = set()
        self._streaming = False  # the open call's arguments are being sent
        self._ended = False
        self.calls = first

    def feed(self, text: str, index: int) -> Iterator[GenerationEvent]:
        if not self.calls:
            self._opening.append(text)
        for scan in () if self._ended else self._scanner.feed(text):
            if isinstance(scan, CallBegun):
                self._streaming = self._sent(scan.name) and scan.name not in self._named
                if self._streaming:
                    yield ToolCallStart(self._new_id(), scan.name, index=index, call_index=self.calls)
            elif isinstance(scan, CallText):
                if self._streaming:
                    yield ToolCallDelta(scan.text, index=index, call_index=self.calls)
            else:
                yield from self._done(scan, index)

    def finish(self, event: Finish) -> Iterator[GenerationEvent]:
        """The end of the choice: a call cut off by its token limit ends where it was cut (and
        the reason stays "length"); an output that made calls and ended on its own ends with
        reason "tool_calls"; one that made none sends what it began as the text it was."""
        if self._streaming:
            if event.reason != "length":
                raise InternalError("The model stopped before completing a tool call.")
            yield ToolCallEnd(index=event.index, call_index=self.calls)
            yield event
        elif not self.calls:
            text = "".join(self._opening)
            if text.strip():
                yield TextDelta(text, index=event.index)
            yield event
        else:
            yield replace(event, reason="tool_calls", stop_sequence=None) if event.reason == "stop" else event

    def _sent(self, name: str) -> bool:
        """Whether a call to `name` may be sent here (its tool is offered, and it is not past the end)."""
        return not self._ended and name in self._checks and (self._parallel or not self.calls)

    def _done(self, scan: CallDone, index: int) -> Iterator[GenerationEvent]:
        name, arguments = checked_call(scan, self._checks)  # the grammar held it: off its schema is a fault
        streaming, self._streaming = self._streaming, False
        if not self._sent(name) or self._repeats.past_end(name, arguments):
            self._ended = True
            return
        if not streaming:
            yield ToolCallStart(self._new_id(), name, index=index, call_index=self.calls)
            yield ToolCallDelta(arguments, index=index, call_index=self.calls)
        yield ToolCallEnd(index=index, call_index=self.calls)
        self._named.add(name)
        self.calls += 1
