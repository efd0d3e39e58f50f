"""Pieces a newcomer can hold: every module of `asgi_llm/`, `adapters/` and `contrib/` is at most
400 lines, and no class has more than 20 methods (public and private, properties included:
every `def` directly in its body). Split by responsibility when one grows past them.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("asgi_llm", "adapters", "contrib")
MAX_LINES = 400
MAX_METHODS = 20


def _modules() -> Iterator[Path]:
    for folder in FOLDERS:
        yield from sorted((ROOT / folder).rglob("*.py"))


MODULES = [path.relative_to(ROOT).as_posix() for path in _modules()]


def _classes(tree: ast.Module) -> Iterator[ast.ClassDef]:
    yield from (node for node in ast.walk(tree) if isinstance(node, ast.ClassDef))


def _methods(cls: ast.ClassDef) -> int:
    return sum(isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) for node in cls.body)


def test_modules_were_found() -> None:
    assert {"asgi_llm/app.py", "adapters/base.py", "contrib/django/asgi.py"} <= set(MODULES)


@pytest.mark.parametrize("module", MODULES)
def test_every_module_is_at_most_400_lines(module: str) -> None:
    lines = len((ROOT / module).read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, f"{module} has {lines} lines (at most {MAX_LINES}): split it by responsibility"


@pytest.mark.parametrize("module", MODULES)
def test_no_class_has_more_than_20_methods(module: str) -> None:
    tree = ast.parse((ROOT / module).read_text(encoding="utf-8"))
    crowded = [
        f"{module}:{cls.lineno} class {cls.name} has {count} methods (at most {MAX_METHODS})"
        for cls in _classes(tree)
        if (count := _methods(cls)) > MAX_METHODS
    ]
    assert crowded == []


def test_the_walk_counts_methods_and_properties() -> None:
    source = "class A:\n    x = 1\n    @property\n    def p(self): ...\n    async def a(self): ...\n    def _b(self): ...\n"
    (cls,) = _classes(ast.parse(source))
    assert _methods(cls) == 3
