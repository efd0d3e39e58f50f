"""How a schema grammar lays out each container: inline, or a member a line. Pure.

Models write JSON the way they read it, mostly pretty-printed, and a printer lays out each
container one way throughout. So a container here is written in one style, chosen at its
opening bracket:

- inline: nothing or a space after the opening bracket, a comma or a colon, and before the
  closing bracket; its members are inline too;
- broken: each member on a line of its own, indented a unit deeper than the container's line
  (two spaces a level, or four: the widths models write), `": "` after each key, and the
  closing bracket on a line at the container's own indent.

Once the style is chosen every separator is one text, so grammar jump-forward drafts a whole
`,\\n    "key": ` and a closing line. A grammar that allows only a space between tokens pushes a
model off its path (the packaged model, held to spaces, repeats one list item until its budget
runs out); one that allows any run of blanks lets it spend its budget on blanks. Values deeper
than `MAX_DEPTH` are written inline, so a recursive schema's rules are copied at most that many
times.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

__all__ = ["MAX_DEPTH", "SPACE", "Level", "Members", "Style", "Writer"]

MAX_DEPTH = 6
SPACE = "space"  # the rule between an inline container's tokens: nothing or one space
UNITS = (2, 4)  # a level's indent, in spaces, as models write it

Level = int | None  # a value's depth; None: written inline


@dataclass(frozen=True)
class Style:
    """How one container is laid out: `unit` spaces a level with a member a line; None: inline."""

    unit: int | None = None

    def named(self, name: str) -> str:
        """The name of this style's copy of a container's rules."""
        return name if self.unit is None else f"{name}-b{self.unit}"


INLINE = Style()
BROKEN = tuple(Style(unit) for unit in UNITS)  # a member a line, at each unit


def inner(level: Level, style: Style) -> Level:
    """The level of the members of a container at `level` written in `style`."""
    if style.unit is None or level is None or level + 1 >= MAX_DEPTH:
        return None
    return level + 1


def laid(level: Level, style: Style, brackets: str, written: str) -> str:
    """A container that holds `written`, laid out in `style`."""
    start, end = brackets[0], brackets[1]
    if style.unit is None or level is None:
        return f'"{start}" {SPACE} {written} {SPACE} "{end}"'
    return f'"{start}{_break(level + 1, style)}" {written} "{_break(level, style)}{end}"'


def container(brackets: str, ways: list[str], may_be_empty: bool) -> str:
    """A container written any of `ways` (`laid`), or empty where it may be (or must be: no ways)."""
    empty = f'"{brackets}"'
    if not ways:
        return empty
    return " | ".join([empty, *ways] if may_be_empty else ways)


def separator(level: Level, style: Style) -> str:
    """The comma between the members of a container at `level` in `style`, and what follows it."""
    if style.unit is None or level is None:
        return f'"," {SPACE}'
    return f'",{_break(level + 1, style)}"'


def colon(style: Style) -> str:
    """What follows a key in a container written in `style`."""
    return f'":" {SPACE}' if style.unit is None else '": "'


Members = tuple[str | None, bool]  # what a container holds, never empty (None: nothing); whether it may be empty


class Writer:
    """Where a grammar's writer is: the depth of the value it writes, and the style of the
    container whose members it writes (schema_gbnf's builder)."""

    def __init__(self) -> None:
        self.level: Level = 0
        self.style: Style = INLINE

    @contextmanager
    def inside(self) -> Iterator[None]:
        """Write a container's members, a level deeper (inline, in an inline container)."""
        outer = self.level
        self.level = inner(outer, self.style)
        try:
            yield
        finally:
            self.level = outer

    def container(self, brackets: str, name: str, fill: Callable[[str], Members], inline: Callable[[], str]) -> str:
        """A container in each style its depth allows: inline (the rule `inline` names, made where
        lines no longer break, as inside an inline container, so the two share it) and a member a
        line at each unit, `fill` writing its members under each (its rules named for the style)."""
        level, outer = self.level, self.style
        try:
            if level is None:
                self.style = INLINE
                written, may_be_empty = fill(name)
                return container(
                    brackets, [] if written is None else [laid(None, INLINE, brackets, written)], may_be_empty
                )
            ways = [self.flat(inline)]
            for style in BROKEN:
                self.style = style
                written, _ = fill(style.named(name))
                if written is not None:  # else it is empty, as its inline rule says
                    ways.append(laid(level, style, brackets, written))
            return " | ".join(ways)
        finally:
            self.style = outer

    def flat(self, make: Callable[[], str]) -> str:
        """What `make` makes where lines no longer break."""
        outer, self.level = self.level, None
        try:
            return make()
        finally:
            self.level = outer

    @property
    def comma(self) -> str:
        """The comma between the members of the container being written."""
        return separator(self.level, self.style)

    @property
    def colon(self) -> str:
        """What follows a key in the object being written."""
        return colon(self.style)


def _break(level: int, style: Style) -> str:
    """A line break and the indent of a line at `level`, as GBNF text."""
    return "\\n" + " " * (level * (style.unit or 0))
