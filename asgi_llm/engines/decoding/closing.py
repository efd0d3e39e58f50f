"""Ending a grammar-held output inside its grammar, whatever its token budget. Pure: the model's
tokenizer and the grammar sampler's verdict come in as functions.

`Closer` follows the output through the grammar (`recognizer.Position`). Each token the
sampler picks is let through while the shortest ending after it still fits in the budget that
would be left; otherwise the closer takes over and feeds, token by token, the tokenization of
the shortest ending (close the string, then the containers, whatever the grammar says is
shortest), then the end-of-generation token. The distance is counted in characters, which
bounds the tokens from above, and in tokens only when the budget gets near it.
"""

from __future__ import annotations

import codecs
import logging
from collections.abc import Callable

from .gbnf import Grammar
from .recognizer import Position

__all__ = ["Closer"]

log = logging.getLogger("asgi_llm.engine")
_PARTIAL = 4  # tokens an unfinished UTF-8 character may still need, at most


class Closer:
    """One choice's watch over its grammar. `choose` is given each token the sampler picked and
    the tokens left (this one included), and returns the token to take instead, or the same."""

    def __init__(
        self,
        grammar: Grammar,
        tokenize: Callable[[str], list[int]],
        piece: Callable[[int], bytes],
        is_end: Callable[[int], bool],
        end_token: int,
    ) -> None:
        self._tokenize = tokenize
        self._piece = piece
        self._is_end = is_end
        self._end = end_token
        self._position: Position | None = Position(grammar)
        self._utf8: codecs.IncrementalDecoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._plan: list[int] = []  # the rest of the ending's tokens, once closing
        self.closing = False
        self.cut = False  # whether the budget made it close (the output was cut short)

    def least(self) -> int:
        """The fewest tokens a whole output can take (from the start: the tokens of the shortest one)."""
        return len(self._tokenize(self._position.ending())) if self._position is not None else 0

    def took(self, text: bytes | str) -> None:
        """Text already in the output (a prefix the grammar was primed with, a forced token)."""
        if self._position is not None:
            self._position, self._utf8 = self._after(self._position, text)

    def forced(self) -> str:
        """The text the output must go on with: while closing, the rest of its ending (the watch
        feeds nothing else); else what the grammar allows alone next (`Position.forced`); '' once
        the output's place is lost, or inside an unfinished character."""
        if self._position is None or self._utf8.getstate()[0]:
            return ""
        return self._position.ending() if self.closing else self._position.forced()

    def close(self) -> None:
        """End as soon as the grammar allows, though the budget is not spent."""
        self.closing = True

    def choose(self, token: int, remaining: int, allows: Callable[[int], bool]) -> int:
        position = self._position
        if position is None or self._is_end(token):
            return token
        if not self.closing:
            after, decoder = self._after(position, self._piece(token))
            if after.dead:
                log.warning("the closing watch lost the output's place in its grammar")
                self._position = None
                return token
            if self._fits(after, bool(decoder.getstate()[0]), remaining - 1):
                self._position, self._utf8 = after, decoder
                return token
            self.closing = self.cut = True
        chosen = self._forced(position, allows)
        if chosen is None:  # the grammar would not take the ending (an unfinished character): the pick stands
            chosen = token
        if not self._is_end(chosen):
            self.took(self._piece(chosen))
        return chosen

    def _fits(self, after: Position, pending: bool, left: int) -> bool:
        """Whether the shortest ending after a token fits in the `left` tokens after it."""
        extra = _PARTIAL if pending else 0
        if left >= after.distance + extra:
            return True
        return not pending and left >= len(self._tokenize(after.ending()))

    def _forced(self, position: Position, allows: Callable[[int], bool]) -> int | None:
        """The first token of the shortest ending (the end token once complete), if the grammar takes it."""
        if position.complete:
            return self._end if allows(self._end) else None
        if self._plan and allows(self._plan[0]):
            return self._plan.pop(0)
        ending = position.ending()
        self._plan = self._tokenize(ending)
        first = self._plan.pop(0) if self._plan else None
        if first is not None and ending.encode("utf-8").startswith(self._piece(first)) and allows(first):
            return first
        self._plan = []
        single = self._tokenize(ending[0])
        return single[0] if len(single) == 1 and allows(single[0]) else None

    def _after(self, position: Position, text: bytes | str) -> tuple[Position, codecs.IncrementalDecoder]:
        """The position after `text` (followed however ambiguous the grammar), and the UTF-8 decoder after it."""
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        decoder.setstate(self._utf8.getstate())
        chars = decoder.decode(text) if isinstance(text, bytes) else text
        return position.advance(chars), decoder
