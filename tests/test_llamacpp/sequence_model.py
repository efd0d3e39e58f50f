"""A backend that keeps every sequence's cache as llama.cpp does, and scripted choices that check
the logits rows they are given: for the scheduler's stateful and fault-injection tests."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from asgi_llm.core import Finish, TextDelta, Usage
from asgi_llm.core.events import EngineEvent, GenerationEvent
from asgi_llm.engines.llamacpp.draft_payoff import DraftPayoff
from asgi_llm.engines.llamacpp.jobs import BatchToken, Ticket, Turn

SYSTEM = list(range(1000, 1040))  # a shared system prompt, longer than COPY_GAIN


class Untimed(DraftPayoff):
    """This model's steps take microseconds of noise: timed, they would make drafting's choices
    follow the machine's load. Untimed, the costs stay unmeasured and every draft is decoded
    whole; tests of what drafts cost give their costs (test_draft_payoff, test_draft_odds)."""

    def timed(self, tokens: int, seconds: float) -> None:
        pass


class Model:
    """Every sequence's cache as llama.cpp keeps it with separate KV streams: which positions
    hold which tokens changes at once on every call; a copy's data moves at the next decode
    (before that decode's own writes), so until then its target's data is not there yet and
    its source's data must not change. A call that breaks this, or a decode at the wrong
    position, raises AssertionError (which the scheduler counts as a fault; there must be none)."""

    def __init__(self, sequences: int) -> None:
        self.cells: list[list[int]] = [[] for _ in range(sequences)]
        self.copies: list[tuple[int, int]] = []  # (source, target) data still to move
        self.last: list[BatchToken] = []

    def _pending(self) -> tuple[set[int], set[int]]:
        return {s for s, _ in self.copies}, {t for _, t in self.copies}

    def decode(self, batch: Sequence[BatchToken]) -> None:
        self.copies.clear()
        assert batch, "an empty batch"
        for token in batch:
            cells = self.cells[token.sequence]
            assert token.position == len(cells), f"position {token.position} after {len(cells)} cells"
            cells.append(token.token)
        self.last = list(batch)

    def forget(self, sequence: int, start: int) -> None:
        del self.cells[sequence][start:]

    def copy(self, source: int, target: int) -> None:
        assert source != target
        self.cells[target] = list(self.cells[source])
        self.copies.append((source, target))

    def save(self, sequence: int, limit: int) -> tuple[Any, int] | None:
        size = len(self.cells[sequence])  # a byte a position
        if size > limit:
            return None
        assert sequence not in self._pending()[1], "saved a sequence whose copied data has not moved yet"
        return list(self.cells[sequence]), size

    def restore(self, sequence: int, state: Any) -> bool:
        sources, targets = self._pending()
        assert sequence not in sources, "overwrote the data a pending copy is to read"
        assert sequence not in targets, "restored data a pending copy is to overwrite"
        self.cells[sequence] = list(state)
        return True

    def holds(self, sequence: int) -> list[int]:
        return list(self.cells[sequence])


class ByteStates(Model):
    """States as llama.cpp gives them, bytes (each cell's token, four bytes a position), for saved
    prompts on disk; `refuse` restores nothing, as llama.cpp refuses a state of another layout."""

    def __init__(self, sequences: int, *, refuse: bool = False) -> None:
        super().__init__(sequences)
        self.refuse = refuse
        self.restored = 0

    def save(self, sequence: int, limit: int) -> tuple[Any, int] | None:
        data = np.asarray(self.cells[sequence], dtype="<i4").view(np.uint8)
        return (data, data.nbytes) if data.nbytes <= limit else None

    def restore(self, sequence: int, state: Any) -> bool:
        if self.refuse:
            self.cells[sequence] = []
            return False
        self.restored += 1
        return super().restore(sequence, np.asarray(state).view("<i4").tolist())


class Scripted:
    """A choice that writes `tokens` tokens, checking each row it is given is its own: the
    row asking for logits, holding its prompt's last token or the token it chose before."""

    greedy = False

    def __init__(self, model: Model, prompt: list[int], tokens: int, mark: int) -> None:
        self.model, self.prompt, self.tokens, self.mark = model, prompt, tokens, mark
        self.produced = self.cached = 0
        self.last = prompt[-1]

    def begin(self, cached: int) -> Sequence[EngineEvent]:
        assert 0 <= cached < len(self.prompt)
        self.cached = cached
        return ()

    def step(self, row: int, top: int | None = None) -> Turn:
        entry = self.model.last[row]
        assert entry.logits and entry.token == self.last, "a choice was handed another's logits"
        self.produced += 1
        events: list[GenerationEvent] = [TextDelta("x")]
        if self.produced < self.tokens:
            self.last = self.mark + self.produced
            return Turn(events, self.last)
        events.append(Finish("length", Usage(len(self.prompt), self.produced, self.cached)))
        return Turn(events, None)

    def close(self) -> None:
        pass


class Request:
    def __init__(self, choices: int) -> None:
        self.items: list[object] = []
        self.ticket = Ticket(self.send, choices)
        self.choices = choices

    def send(self, item: object) -> bool:
        self.items.append(item)
        return True
