"""String `format`s as patterns a grammar holds, and the checks a finished output must pass. Pure.

Each pattern allows a strict, common subset of its format, so that what it allows passes
jsonschema's format checks and pydantic's own types alike (`EmailStr`, `datetime`, `UUID`,
`AnyUrl`...): four-digit years from 1000, days a month always has, RFC 3339 times with an
offset, ASCII e-mail addresses and host names with bounded labels, IPv6 in full or with one
`::`, regular expressions of plain characters (anchors at the ends, `.` the only special one).
jsonschema checks `hostname`, `uri` and `duration` only with optional packages; where
those are missing, `format_checker` adds checks of its own, so every format enforced is checked.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from jsonschema import FormatChecker

__all__ = ["FORMATS", "format_checker"]

_DATE = (
    r"[1-9][0-9]{3}-(?:(?:0[1-9]|1[0-2])-(?:0[1-9]|1[0-9]|2[0-8])|(?:0[13-9]|1[0-2])-(?:29|30)|(?:0[13578]|1[02])-31)"
)
_HOUR = r"(?:[01][0-9]|2[0-3])"
_TIME = rf"{_HOUR}:[0-5][0-9]:[0-5][0-9](?:\.[0-9]{{1,6}})?(?:Z|[+-]{_HOUR}:[0-5][0-9])"
_LABEL = r"[A-Za-z0-9]{1,12}(?:-[A-Za-z0-9]{1,12}){0,2}"  # no "--" (IDNA keeps it for "xn--")
_HOST = rf"(?:{_LABEL}\.){{0,3}}[A-Za-z][A-Za-z0-9]{{0,11}}(?:-[A-Za-z0-9]{{1,12}}){{0,2}}"
_DOMAIN = rf"(?:{_LABEL}\.){{1,3}}[A-Za-z]{{2,10}}"
_LOCAL = r"[A-Za-z0-9_+-]{1,32}(?:\.[A-Za-z0-9_+-]{1,16}){0,2}"
_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_GROUP = r"[0-9a-f]{1,4}"
_N = r"[0-9]{1,4}"
_CLOCK = rf"T(?:{_N}H(?:{_N}M(?:{_N}S)?)?|{_N}M(?:{_N}S)?|{_N}S)"
_DURATION = rf"P(?:{_N}W|(?:{_N}Y(?:{_N}M(?:{_N}D)?)?|{_N}M(?:{_N}D)?|{_N}D)(?:{_CLOCK})?|{_CLOCK})"
_PATH = r"(?:/[A-Za-z0-9._~-]{0,32}){0,8}"


def _uuid(version: str) -> str:
    return rf"[0-9a-f]{{8}}-[0-9a-f]{{4}}-{version}[0-9a-f]{{3}}-[89ab][0-9a-f]{{3}}-[0-9a-f]{{12}}"


_REGEX = r"\^?[A-Za-z0-9 _.,:;/=@-]{0,64}\$?"  # a regular expression of literal characters: it always compiles
_URI = rf"https?://{_HOST}(?::[1-9][0-9]{{0,3}})?{_PATH}"
FORMATS = {
    "date": _DATE,
    "time": _TIME,
    "date-time": f"{_DATE}T{_TIME}",
    "duration": _DURATION,
    "email": f"{_LOCAL}@{_DOMAIN}",
    "idn-email": f"{_LOCAL}@{_DOMAIN}",
    "hostname": _HOST,
    "idn-hostname": _HOST,
    "ipv4": rf"{_OCTET}(?:\.{_OCTET}){{3}}",
    "ipv6": rf"{_GROUP}(?::{_GROUP}){{7}}|(?:{_GROUP}(?::{_GROUP}){{0,2}})?::(?:{_GROUP}(?::{_GROUP}){{0,3}})?",
    "uuid": _uuid("[1-5]"),
    **{f"uuid{v}": _uuid(str(v)) for v in range(1, 6)},
    "uri": _URI,
    "uri-reference": _URI,
    "iri": _URI,
    "iri-reference": _URI,
    "regex": _REGEX,
}
_HOSTNAME = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)(?:\.(?!-)[A-Za-z0-9-]{1,63}(?<!-))*\.?")
_ISO_DURATION = re.compile(
    r"P(?:\d+W|(?=\d|T\d)(?:\d+Y)?(?:\d+M)?(?:\d+D)?(?:T(?=\d)(?:\d+H)?(?:\d+M)?(?:\d+(?:\.\d+)?S)?)?)"
)


def _hostname(value: object) -> bool:
    return not isinstance(value, str) or (len(value) <= 253 and bool(_HOSTNAME.fullmatch(value)))


def _uri(value: object) -> bool:
    if not isinstance(value, str):
        return True
    parts = urlsplit(value)
    return bool(re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]*", parts.scheme)) and " " not in value


def _duration(value: object) -> bool:
    return not isinstance(value, str) or bool(_ISO_DURATION.fullmatch(value)) and not value.endswith("T")


def format_checker(base: FormatChecker) -> FormatChecker:
    """A draft's format checks (`base`), with ours for the formats jsonschema leaves unchecked here."""
    checker = FormatChecker(())
    checker.checkers = dict(base.checkers)
    for name, check in (("hostname", _hostname), ("uri", _uri), ("duration", _duration)):
        if name not in checker.checkers:
            checker.checks(name)(check)
    return checker
