"""GBNF for an item repeated any number of times between two bounds, in a grammar whose size
grows with the number of digits of the bounds, not with the bounds. Pure.

llama.cpp unrolls `x{m,n}` into n - m nested rules, so `maxLength: 65535` would be 65535
rules. Here counts are written in blocks of 16: `x{1000}` is a block of 256 (a block of 16
blocks of 16) three times, then blocks of 16 and single items; "up to n" splits into "up to
q - 1 blocks, then up to 15 items" or "exactly q blocks, then up to n mod 16 items".
"""

from __future__ import annotations

__all__ = ["counted"]

_BLOCK = 16
_INLINE = 32  # counts up to this are written as llama.cpp's own repetition


def counted(rules: dict[str, str], name: str, item: str, least: int, most: int | None) -> str:
    """An expression for `item` (a rule name or a parenthesised group) `least` to `most` times
    (`most` None: no limit); rules it needs are added to `rules`, named from `name`."""
    if most is not None and most <= _INLINE:
        return _inline(item, least, most)
    levels = [item]
    head = _exactly(rules, name, levels, 0, least)
    tail = f"{item}*" if most is None else _upto(rules, name, levels, 0, most - least)
    return f"{head} {tail}".strip()


def _inline(item: str, least: int, most: int) -> str:
    if most == 0:
        return ""
    if least == most:
        return f"{item}{{{least}}}" if least > 1 else item
    return f"{item}{{{least},{most}}}"


def _level(rules: dict[str, str], name: str, levels: list[str], j: int) -> str:
    """The rule for a block of 16^j items."""
    while len(levels) <= j:
        block = f"{name}-b{len(levels)}"
        rules[block] = f"{levels[-1]}{{{_BLOCK}}}"
        levels.append(block)
    return levels[j]


def _exactly(rules: dict[str, str], name: str, levels: list[str], j: int, count: int) -> str:
    """Blocks of level `j` and above making `count` level-`j` blocks, largest first."""
    parts = []
    while count:
        count, digit = divmod(count, _BLOCK)
        if digit:
            parts.append(_inline(_level(rules, name, levels, j), digit, digit))
        j += 1
    return " ".join(reversed(parts))


def _upto(rules: dict[str, str], name: str, levels: list[str], j: int, count: int) -> str:
    """Zero to `count` level-`j` blocks."""
    unit = _level(rules, name, levels, j)
    if count < 2 * _BLOCK:
        return _inline(unit, 0, count)
    blocks, rest = divmod(count, _BLOCK)
    rule = f"{name}-u{j}"
    fewer = f"{_upto(rules, name, levels, j + 1, blocks - 1)} {unit}{{0,{_BLOCK - 1}}}"
    full = f"{_exactly(rules, name, levels, j + 1, blocks)} {_inline(unit, 0, rest)}"
    rules[rule] = f"{fewer.strip()} | {full.strip()}"
    return rule
