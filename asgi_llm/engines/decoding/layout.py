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

from dataclasses import dataclass

__all__ = ["INLINE", "MAX_DEPTH", "SPACE", "Level", "Style", "colon", "container", "inner", "laid", "separator", "styles"]

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


def styles(level: Level) -> tuple[Style, ...]:
    """The styles a container at `level` may take: inline only where lines no longer break."""
    return (INLINE,) if level is None else (INLINE, *(Style(unit) for unit in UNITS))


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


def _break(level: int, style: Style) -> str:
    """A line break and the indent of a line at `level`, as GBNF text."""
    return "\\n" + " " * (level * (style.unit or 0))
