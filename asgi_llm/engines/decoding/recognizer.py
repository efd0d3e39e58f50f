"""Where a text stands in a `gbnf.Grammar`, and the shortest way from there to its end. Pure.

llama.cpp's grammar sampler keeps every parse stack the text so far leaves open. Their number
multiplies with ambiguity: a schema's `anyOf` of objects whose properties are all optional
cannot tell its branches apart after `{"props": {`, and each branch nests the same sub-rules,
so a text three such levels deep has one stack per choice of branch at every level. Here the
stacks share their frames instead (a graph-structured stack, as in Tomita's GLR parsing): a
frame is made once per rule step and character read, and returns to every frame that may
have called it. So a character opens at most one frame per step of the grammar, however
ambiguous the text, and the watch never has to give up on one.

A frame knows the shortest text from the end of its alternative to the end of the grammar
(`_below`, a minimum over its callers), so the distance to the end is exact, and the shortest
ending is read off the best callers.
"""

from __future__ import annotations

from collections.abc import Iterable

from .gbnf import CharSet, Element, Grammar

__all__ = ["MAX_NESTING", "Position"]

MAX_NESTING = 400  # rules entered one inside another before a character: deeper is refused (`client_grammar`)


class _Frame:
    """Step `pos` of alternative `alt` of `rule`, opened at one character of the text. `callers`
    are the frames waiting on `rule` (each resumes after its own step), or None (the bottom: the
    text may end). A frame waiting on a rule as its last step is never made: its callee returns
    to its callers (so a long string or array does not pile up frames)."""

    __slots__ = ("alt", "below", "best", "callers", "pos", "rule")

    def __init__(self, rule: str, alt: int, pos: int, callers: set[_Frame | None]) -> None:
        self.rule = rule
        self.alt = alt
        self.pos = pos
        self.callers = callers
        self.below: int | None = None  # the shortest text from the end of the alternative on (once asked)
        self.best: _Frame | None = None  # the caller that text goes through (None: the bottom)


class Position:
    """The open parse frames after some text; `advance` returns the position after more text."""

    def __init__(self, grammar: Grammar) -> None:
        self.grammar = grammar
        level = _Level(grammar)
        for alt in range(len(grammar.rules[grammar.root])):
            level.arrive(grammar.root, alt, 0, (None,))
        self._tops: tuple[_Frame, ...] = tuple(level.tops)
        self._complete = level.complete

    @property
    def dead(self) -> bool:
        """Whether the text left the grammar (nothing is open)."""
        return not self._tops and not self._complete

    @property
    def complete(self) -> bool:
        """Whether the text may end here."""
        return self._complete

    @property
    def distance(self) -> int:
        """The length of the shortest text that completes the grammar from here (0: it may end)."""
        if self._complete or not self._tops:
            return 0
        return min(self._distance(top) for top in self._tops)

    def ending(self) -> str:
        """The shortest text that completes the grammar from here."""
        if self._complete or not self._tops:
            return ""
        frame: _Frame | None = min(self._tops, key=self._distance)
        parts = []
        pos = 0
        while frame is not None:
            parts.append(self.grammar.tail(frame.rule, frame.alt, frame.pos + pos))
            frame, pos = frame.best, 1
        return "".join(parts)

    def forced(self, most: int = 64) -> str:
        """The longest text, up to `most` characters, that every continuation from here begins
        with: '' where the text may end here or more than one character may come next (a JSON
        key's rest, a `const`, a closing quote where no space is allowed before what follows)."""
        position, text = self, ""
        while len(text) < most and (ch := position._only()) is not None:
            text += ch
            position = position.advance(ch)
        return text

    def _only(self) -> str | None:
        """The one character that may come next, where only one may and the text may not end here."""
        if self._complete or not self._tops:
            return None
        rules = self.grammar.rules
        chars = {_single(rules[top.rule][top.alt][top.pos]) for top in self._tops}
        only = chars.pop() if len(chars) == 1 else None
        return chr(only) if only is not None else None

    def advance(self, text: Iterable[str]) -> Position:
        tops, complete = self._tops, self._complete
        for ch in text:
            level = _Level(self.grammar)
            rules = self.grammar.rules
            for top in tops:
                step = rules[top.rule][top.alt][top.pos]
                if ch in step:
                    level.arrive(top.rule, top.alt, top.pos + 1, top.callers)
            tops, complete = tuple(level.tops), level.complete
            if not tops and not complete:
                break
        after = Position.__new__(Position)
        after.grammar, after._tops, after._complete = self.grammar, tops, complete
        return after

    def _distance(self, top: _Frame) -> int:
        return self.grammar.rest[top.rule][top.alt][top.pos] + _below(self.grammar, top)


class _Level:
    """The frames one character opens: each made once, its callers merged as they are found."""

    def __init__(self, grammar: Grammar) -> None:
        self.rules = grammar.rules
        self.frames: dict[tuple[str, int, int], _Frame] = {}
        self.called: dict[str, set[_Frame | None]] = {}  # the callers each rule was entered for
        self.returned: set[_Frame] = set()  # frames whose callee ended at this character
        self.tops: list[_Frame] = []  # the frames waiting on a character
        self.complete = False

    def arrive(self, rule: str, alt: int, pos: int, callers: Iterable[_Frame | None]) -> None:
        """Opens step `pos` of an alternative for `callers`, and all it leads to without a character."""
        rules, frames, returned = self.rules, self.frames, self.returned
        work: list[_Work] = [(rule, alt, pos, callers)]
        while work:
            rule, alt, pos, callers = work.pop()
            steps = rules[rule][alt]
            if pos == len(steps):  # the alternative ends: its callers resume
                for caller in callers:
                    if caller is None:
                        self.complete = True
                    elif caller not in returned:
                        returned.add(caller)
                        work.append((caller.rule, caller.alt, caller.pos + 1, caller.callers))
            elif isinstance(step := steps[pos], str) and pos == len(steps) - 1:
                self._call(step, callers, work)  # a tail call: the callee returns to these callers
            elif (frame := frames.get((rule, alt, pos))) is None:
                frame = frames[rule, alt, pos] = _Frame(rule, alt, pos, set(callers))
                if isinstance(step, str):  # a new frame: no rule was entered for it yet
                    work.extend((step, a, 0, (frame,)) for a in range(len(rules[step])))
                else:
                    self.tops.append(frame)
            elif new := [c for c in callers if c not in frame.callers]:
                frame.callers.update(new)
                if frame in returned:  # its callee already ended here: the new callers resume too
                    work.append((rule, alt, pos + 1, new))

    def _call(self, rule: str, callers: Iterable[_Frame | None], work: list[_Work]) -> None:
        """Enters each alternative of `rule` for those of `callers` it was not entered for yet."""
        called = self.called.setdefault(rule, set())
        new = [c for c in callers if c not in called]
        if new:
            called.update(new)
            work.extend((rule, a, 0, new) for a in range(len(self.rules[rule])))


_Work = tuple[str, int, int, Iterable[_Frame | None]]


def _single(step: Element) -> int | None:
    """The code point of a step that allows one character only; None for any other step."""
    if not isinstance(step, CharSet) or step.negated or any(lo != hi for lo, hi in step.ranges):
        return None
    points = {lo for lo, _ in step.ranges}
    return points.pop() if len(points) == 1 else None


def _below(grammar: Grammar, top: _Frame) -> int:
    """The shortest text from the end of `top`'s alternative to the end of the grammar, memoised
    on the frames (a frame's callers are older or, made at the same character, never its own
    callees: the grammar has no left recursion); iterative, for frames nest deeper than Python recurses."""
    rest = grammar.rest
    walk = [top]
    while walk:
        frame = walk[-1]
        if frame.below is not None:
            walk.pop()
            continue
        pending = [c for c in frame.callers if c is not None and c.below is None]
        if pending:
            walk.extend(pending)
            continue
        walk.pop()
        below, best = -1, None
        for c in frame.callers:
            length = 0 if c is None else rest[c.rule][c.alt][c.pos + 1] + (c.below or 0)
            if below < 0 or length < below:
                below, best = length, c
        frame.below, frame.best = below, best
    return top.below or 0
