"""Relative, slash-tolerant route matching: the mount decides the prefix, nothing redirects."""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from .asgi import Scope

__all__ = ["Match", "Router", "route_path"]

T = TypeVar("T")
_PARAM = re.compile(r"\{(\w+)(?::path)?\}")


def route_path(scope: Scope) -> str:
    """The path below our mount point, whichever way the host reports it."""
    path: str = scope.get("path", "/")
    root: str = scope.get("root_path", "")
    if root and (path == root or path.startswith(root.rstrip("/") + "/")):
        path = path[len(root) :]
    path = "/" + path.strip("/")
    return path


def _compile(template: str) -> re.Pattern[str]:
    pattern, at = "", 0
    for m in _PARAM.finditer(template):
        pattern += re.escape(template[at : m.start()])
        pattern += f"(?P<{m.group(1)}>.+)" if m.group(0).endswith(":path}") else f"(?P<{m.group(1)}>[^/]+)"
        at = m.end()
    return re.compile(pattern + re.escape(template[at:]) + r"\Z")


@dataclass(frozen=True)
class Match(Generic[T]):
    target: T | None
    params: dict[str, str]
    allowed: tuple[str, ...]  # methods the path accepts, for 405
    owner: T | None = None
    """For a 405: the first route whose path matched (whose protocol words the refusal)."""


class Router(Generic[T]):
    """Routes are tried in order; one with a required header matches only when the request has it."""

    def __init__(self, routes: Sequence[tuple[str, tuple[str, ...], T, str | None]]) -> None:
        self._routes = [(_compile(path), methods, target, header) for path, methods, target, header in routes]

    def match(self, path: str, method: str, headers: Collection[str] = ()) -> Match[T] | None:
        allowed: list[str] = []
        owner: T | None = None
        for pattern, methods, target, header in self._routes:
            found = pattern.match(path)
            if found is None or (header is not None and header not in headers):
                continue
            if method in methods or (method == "HEAD" and "GET" in methods):
                return Match(target, found.groupdict(), methods)
            allowed.extend(methods)
            owner = target if owner is None else owner
        return Match(None, {}, tuple(allowed), owner) if allowed else None
