"""Where a schema grammar lets whitespace go: nothing, a space, or a line break and the indent of
the depth. Pure.

Whitespace goes where printers put it: after an opening bracket, a comma or a colon, and before a
closing bracket (never before a comma or a colon, where a model that strays there loses the
layout it was writing). Models write JSON the way they read it, mostly pretty-printed. A grammar
that allows only a space between tokens pushes a model off that path (the packaged model, held
to spaces, repeats one list item until its budget runs out); one that allows any run of blanks
lets it spend its budget on blanks. Here a break inside a container is followed by the indent of
its depth, two spaces a level or four (the two widths models write; a tokenizer often merges the
break with the spaces), so a run of blanks is never longer than the depth needs. Values deeper
than `MAX_DEPTH` are written compact, so a recursive schema's rules are copied at most that many
times.
"""

from __future__ import annotations

__all__ = ["MAX_DEPTH", "SPACE", "Level", "deeper", "gap", "members", "separator"]

MAX_DEPTH = 6
SPACE = "space"  # the rule after a key's colon, and between members of a compact container: nothing or one space

UNITS = ("  ", "    ")  # a level's indent: two spaces or four, as the model writes it
Level = int | None  # a value's depth; None: written compact


def deeper(level: Level) -> Level:
    """The level of a container's members."""
    return level + 1 if level is not None and level + 1 < MAX_DEPTH else None


def gap(rules: dict[str, str], level: Level) -> str:
    """The rule between tokens where a line at `level` may begin (its indent two spaces a level, or
    four), added to `rules` once."""
    if level is None:
        return SPACE
    name = f"{SPACE}-{level}"
    indents = " | ".join(f'"{unit * level}"' for unit in UNITS) if level else '""'
    rules.setdefault(name, f'" "? | "\\n" ({indents})')
    return name


def members(rules: dict[str, str], level: Level, brackets: str, written: str | None, may_be_empty: bool) -> str:
    """A container at `level`: `brackets` around `written` (members that are never empty, `None`
    where none may be written), and the room for a break after the opening bracket and before
    the closing one."""
    start, end = (f'"{b}"' for b in brackets)
    if written is None:
        return f"{start} {end}"
    inner = f"{gap(rules, member_line(level))} {written} {gap(rules, level)}"
    return f"{start} {f'({inner})?' if may_be_empty else inner} {end}"


def separator(rules: dict[str, str], level: Level) -> str:
    """The comma between a container's members at `level`, and the break that may follow it."""
    return f'"," {gap(rules, member_line(level))}'


def member_line(level: Level) -> Level:
    """Where a container's members begin their lines: one indent deeper (nowhere, compact)."""
    return None if level is None else level + 1
