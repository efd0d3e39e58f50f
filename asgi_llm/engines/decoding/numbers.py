"""Bounded integers and numbers as patterns of their decimal digits. Pure.

A range becomes a regular expression over the number's JSON text, digit by digit (llama.cpp's
C++ converter does the same for integers): `[5, 123]` is `[5-9]|[1-9][0-9]|1[01][0-9]|12[0-3]`.
Bounded numbers are written without exponents. jsonschema compares a number as a float, so an
exclusive bound on a `number` moves to the nearest point of a grid of 10^-6 inside it: a
decimal that differs from the bound in at most 15 digits never rounds onto it. `multipleOf`
holds for integers (and integral divisors), by an automaton that follows the remainder.
Every number is bounded in length, as the unbounded rule is (16 digits a part): a budget
that holds the longest document a schema allows then always sees it end on its own.
"""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any

from .automata import Dfa, compile_pattern, intersect, with_residue
from .pattern import PatternError

__all__ = ["number_dfa"]

_GRID = Decimal("0.000001")
_LARGEST = Decimal(10) ** 9  # beyond this a float bound and a decimal near it may round together
_FRACTION = r"(?:\.[0-9]{1,16})?"
_FRACTIONAL = r"^-?(?:0|[1-9][0-9]*)\.[0-9]*[1-9][0-9]*$"  # a fraction that is not all zeros: not whole


def _digits(lo: str, hi: str) -> str:
    """Decimal strings of one length from `lo` to `hi` (same length, lo <= hi)."""
    if lo == hi:
        return lo
    if len(lo) == 1:
        return f"[{lo}-{hi}]"
    if lo[0] == hi[0]:
        return lo[0] + _digits(lo[1:], hi[1:])
    n = len(lo) - 1
    if lo[1:] == "0" * n and hi[1:] == "9" * n:
        return f"[{lo[0]}-{hi[0]}][0-9]{{{n}}}"
    parts = [lo[0] + _digits(lo[1:], "9" * n)]
    if int(lo[0]) + 1 <= int(hi[0]) - 1:
        parts.append(f"[{int(lo[0]) + 1}-{int(hi[0]) - 1}][0-9]{{{n}}}")
    parts.append(hi[0] + _digits("0" * n, hi[1:]))
    return "(?:" + "|".join(parts) + ")"


def int_range(lo: int, hi: int | None) -> str | None:
    """Non-negative integers from `lo` to `hi` (None: no end), without leading zeros; None if none."""
    if hi is not None and hi < lo:
        return None
    parts = []
    top = len(str(hi)) if hi is not None else len(str(lo))
    for n in range(len(str(lo)), top + 1):
        first = max(lo, 10 ** (n - 1) if n > 1 else 0)
        last = min(hi, 10**n - 1) if hi is not None else 10**n - 1
        if first <= last:
            parts.append(_digits(str(first), str(last)))
    if hi is None:
        parts.append(f"[1-9][0-9]{{{top},{max(top, 15)}}}")
    return "(?:" + "|".join(parts) + ")"


def _ge(s: str) -> str:
    """Digit strings t with 0.t >= 0.s (s has no trailing zeros)."""
    if not s:
        return "[0-9]{0,16}"
    alts = [f"{s[0]}{_ge(s[1:])}"]
    if s[0] != "9":
        alts.append(f"[{int(s[0]) + 1}-9][0-9]{{0,15}}")
    return "(?:" + "|".join(alts) + ")"


def _le(s: str, empty: bool = True) -> str:
    """Digit strings t (empty ones if `empty`) with 0.t <= 0.s."""
    if not s:
        return "0{0,16}" if empty else "0{1,16}"
    alts = [""] if empty else []
    alts.append(f"{s[0]}{_le(s[1:])}")
    if s[0] != "0":
        alts.append(f"[0-{int(s[0]) - 1}][0-9]{{0,15}}")
    return "(?:" + "|".join(alts) + ")"


def _between(s: str, u: str) -> str:
    """Digit strings t with 0.s <= 0.t <= 0.u (s <= u), empty ones where s is empty."""
    if not s:
        return _le(u)
    top = u[0] if u else "0"
    if s[0] == top:
        return s[0] + _between(s[1:], u[1:])
    alts = [s[0] + _ge(s[1:]), top + _le(u[1:])]
    if int(s[0]) + 1 <= int(top) - 1:
        alts.append(f"[{int(s[0]) + 1}-{int(top) - 1}][0-9]{{0,15}}")
    return "(?:" + "|".join(alts) + ")"


def _split(value: Decimal) -> tuple[int, str]:
    whole = int(value)
    fraction = format(value - whole, "f").partition(".")[2].rstrip("0")
    return whole, fraction


def _magnitudes(lo: Decimal, hi: Decimal | None, fractions: bool) -> str | None:
    """Non-negative numbers from `lo` to `hi` (None: no end), with fractions if `fractions`."""
    if hi is not None and hi < lo:
        return None
    tail = _FRACTION if fractions else ""
    a, af = _split(lo)
    if hi is None:
        first = f"{a}\\.{_ge(af)}" if af else f"{a}{tail}"
        rest = int_range(a + 1, None)
        return f"(?:{first}|{rest}{tail})"
    b, bf = _split(hi)
    if a == b:
        if af:
            return f"{a}\\.{_between(af, bf)}"
        return f"{a}(?:\\.{_le(bf, empty=False)})?" if fractions else str(a)
    parts = [f"{a}\\.{_ge(af)}" if af else f"{a}{tail}"]
    middle = int_range(a + 1, b - 1)
    if middle is not None:
        parts.append(middle + tail)
    parts.append(f"{b}(?:\\.{_le(bf, empty=False)})?" if fractions else str(b))
    return "(?:" + "|".join(parts) + ")"


def _signed(lo: Decimal | None, hi: Decimal | None, fractions: bool) -> str:
    parts = []
    if lo is None or lo < 0:  # negative numbers: a minus and the magnitude
        low = max(-hi, Decimal(0)) if hi is not None else Decimal(0)
        magnitude = _magnitudes(low, -lo if lo is not None else None, fractions)
        if magnitude is not None:
            parts.append("-" + magnitude)
    if hi is None or hi >= 0:
        magnitude = _magnitudes(max(lo, Decimal(0)) if lo is not None else Decimal(0), hi, fractions)
        if magnitude is not None:
            parts.append(magnitude)
    if not parts:
        raise PatternError("no number is allowed")
    return "^(?:" + "|".join(parts) + ")$"


def _bound(schema: dict[str, Any], key: str) -> Decimal | None:
    value = schema.get(key)
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        raise PatternError(f"'{key}' is not finite")
    return Decimal(value) if isinstance(value, int) else Decimal(repr(value))


def _integer_bounds(schema: dict[str, Any]) -> tuple[Decimal | None, Decimal | None]:
    """The least and greatest integers allowed (compared exactly, as Python compares an int and a float)."""
    lo = hi = None
    for key, exclusive in (("minimum", False), ("exclusiveMinimum", True)):
        if schema.get(key) is not None:
            exact = Decimal(schema[key])
            low = math.floor(exact) + 1 if exclusive else math.ceil(exact)
            lo = Decimal(low) if lo is None else max(lo, Decimal(low))
    for key, exclusive in (("maximum", False), ("exclusiveMaximum", True)):
        if schema.get(key) is not None:
            exact = Decimal(schema[key])
            high = math.ceil(exact) - 1 if exclusive else math.floor(exact)
            hi = Decimal(high) if hi is None else min(hi, Decimal(high))
    return lo, hi


def _number_bounds(schema: dict[str, Any]) -> tuple[Decimal | None, Decimal | None]:
    lo, hi = _bound(schema, "minimum"), _bound(schema, "maximum")
    low, high = _bound(schema, "exclusiveMinimum"), _bound(schema, "exclusiveMaximum")
    for bound in (low, high):
        if bound is not None and abs(bound) >= _LARGEST:
            raise PatternError(f"an exclusive bound beyond {_LARGEST:,}")
    if low is not None:
        above = (low / _GRID).to_integral_value(rounding="ROUND_FLOOR") * _GRID + _GRID
        lo = above if lo is None else max(lo, above)
    if high is not None:
        below = (high / _GRID).to_integral_value(rounding="ROUND_CEILING") * _GRID - _GRID
        hi = below if hi is None else min(hi, below)
    return lo, hi


def number_dfa(schema: dict[str, Any]) -> Dfa:
    """The JSON texts of the integers or numbers `schema` (type, bounds, `multipleOf`) allows."""
    divisor = schema.get("multipleOf")
    integral = schema.get("type") == "integer" or divisor is not None
    if divisor is not None and (Decimal(repr(divisor)) % 1 != 0 or divisor <= 0):
        raise PatternError("a 'multipleOf' that is not a whole number (float division makes it unreliable)")
    lo, hi = _integer_bounds(schema) if integral else _number_bounds(schema)
    dfa = compile_pattern(_signed(lo, hi, fractions=not integral))
    if divisor is not None and int(divisor) != 1:
        dfa = with_residue(dfa, int(divisor))
    if schema.get("x-fractional"):  # a number that is not whole (`not` of `integer`)
        dfa = intersect(dfa, compile_pattern(_FRACTIONAL)) if not integral else Dfa((), frozenset())
    if dfa.empty:
        raise PatternError("no number is allowed")
    return dfa
