"""Where a text stands in a `gbnf.Grammar`, and the shortest way from there to its end. Pure.

A `Position` is the set of parse stacks the text so far leaves open (as llama.cpp's grammar
sampler keeps them), each stack waiting on one character step, or empty where the text may
end. Each frame carries the length of the shortest text that finishes it and every frame
below it, so the distance to the end is a minimum over the stacks, and the shortest ending
is read off the best stack.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from .gbnf import CharSet, Grammar, GrammarError

__all__ = ["MAX_NESTING", "Position"]

_MAX_STACKS = 256  # beyond this the text is too ambiguous to follow cheaply
MAX_NESTING = 400  # rules entered one inside another before a character: deeper is refused


class _Frame(NamedTuple):
    rule: str
    alt: int
    pos: int
    below: _Frame | None
    distance: int  # the shortest text that finishes this frame and those below it


Stack = _Frame | None  # None: the text may end here


class Position:
    """The open parse stacks after some text; `advance` returns the position after more text."""

    def __init__(self, grammar: Grammar, stacks: frozenset[Stack] | None = None) -> None:
        self.grammar = grammar
        if stacks is None:
            found: set[Stack] = set()
            for alt in range(len(grammar.rules[grammar.root])):
                self._expand(self._frame(grammar.root, alt, 0, None), found, 0)
            stacks = frozenset(found)
        self.stacks = stacks

    @property
    def dead(self) -> bool:
        """Whether the text left the grammar (no stack is open)."""
        return not self.stacks

    @property
    def complete(self) -> bool:
        """Whether the text may end here."""
        return None in self.stacks

    @property
    def distance(self) -> int:
        """The length of the shortest text that completes the grammar from here (0: it may end)."""
        return min((s.distance if s is not None else 0) for s in self.stacks) if self.stacks else 0

    def ending(self) -> str:
        """The shortest text that completes the grammar from here."""
        if not self.stacks or self.complete:
            return ""
        stack: Stack = min(self.stacks, key=lambda s: s.distance if s is not None else 0)
        parts = []
        while stack is not None:
            parts.append(self.grammar.tail(stack.rule, stack.alt, stack.pos))
            stack = stack.below
        return "".join(parts)

    def advance(self, text: Iterable[str]) -> Position:
        stacks = self.stacks
        for ch in text:
            found: set[Stack] = set()
            for stack in stacks:
                if stack is None:
                    continue
                step = self.grammar.rules[stack.rule][stack.alt][stack.pos]
                if isinstance(step, CharSet) and ch in step:
                    self._expand(self._frame(stack.rule, stack.alt, stack.pos + 1, stack.below), found, 0)
            if len(found) > _MAX_STACKS:
                raise GrammarError("the text is too ambiguous under this grammar to follow")
            stacks = frozenset(found)
            if not stacks:
                break
        return Position(self.grammar, stacks)

    def _frame(self, rule: str, alt: int, pos: int, below: _Frame | None) -> _Frame:
        rest = self.grammar.rest[rule][alt][pos]
        return _Frame(rule, alt, pos, below, rest + (below.distance if below is not None else 0))

    def _expand(self, frame: Stack, found: set[Stack], depth: int) -> None:
        """Adds the stacks `frame` opens, each waiting on a character step (or empty)."""
        while frame is not None and frame.pos == len(self.grammar.rules[frame.rule][frame.alt]):
            frame = frame.below
        if frame is None:
            found.add(None)
            return
        step = self.grammar.rules[frame.rule][frame.alt][frame.pos]
        if isinstance(step, CharSet):
            found.add(frame)
            return
        if depth > MAX_NESTING:
            raise GrammarError(f"the grammar nests more than {MAX_NESTING} rules before a character")
        after = self._frame(frame.rule, frame.alt, frame.pos + 1, frame.below)
        for alt in range(len(self.grammar.rules[step])):
            self._expand(self._frame(step, alt, 0, after), found, depth + 1)
