"""ARCHITECTURE.md stays the map of the code: its import table says what `MAY_IMPORT` says, it
names every top-level module and package, and every file it names exists.

The import table is read live from tests/test_static/test_architecture.py, so a row added there
fails here until ARCHITECTURE.md describes it.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "ARCHITECTURE.md"
TABLE_HEADING = "### The import table"
NOTHING = "nothing of ours"


def _import_rules() -> ModuleType:
    """The import test's module, loaded under a name of its own (its tests are not collected again)."""
    spec = importlib.util.spec_from_file_location("_architecture_rules", Path(__file__).with_name("test_architecture.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


RULES = _import_rules()
MAY_IMPORT: dict[str, tuple[str, ...]] = RULES.MAY_IMPORT
SOURCES: dict[str, Path] = RULES.SOURCES
TEXT = DOC.read_text(encoding="utf-8")


def _full(name: str) -> str:
    """A name of the import table (`core`, `engines.llamacpp.jobs`) as a module name."""
    return name if name == "asgi_llm" or name.startswith("asgi_llm.") else f"asgi_llm.{name}"


def _backticked(text: str) -> list[str]:
    return re.findall(r"`([^`\n]+)`", text)


def _table_lines() -> list[str]:
    start = TEXT.index(TABLE_HEADING) + len(TABLE_HEADING)
    end = TEXT.find("\n#", start)
    return [line for line in TEXT[start : end if end >= 0 else None].splitlines() if line.startswith("|")]


def _doc_table() -> dict[str, set[str]]:
    """Each row of ARCHITECTURE.md's import table: the module it names → what it says it may import."""
    rows: dict[str, set[str]] = {}
    for line in _table_lines()[2:]:  # past the header and its rule
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        (named,) = _backticked(cells[0]) or [cells[0]]
        allowed = cells[-1]
        assert named not in rows, f"ARCHITECTURE.md's import table has two rows for `{named}`"
        rows[_full(named)] = set() if allowed == NOTHING else {_full(name) for name in _backticked(allowed)}
    return rows


def _as_module(span: str) -> str | None:
    """A backticked path or dotted name of ours (`asgi_llm/pool.py`, `contrib/django/`,
    `engines/llamacpp/`, `asgi_llm.app`) as a module name; None for anything else."""
    if span.startswith("asgi_llm") and re.fullmatch(r"[\w.]+", span):
        return span
    if "/" not in span or span.startswith(("/", ".")) or not re.fullmatch(r"[\w./]+", span):
        return None
    parts = span.removesuffix("/").removesuffix(".py").split("/")
    parts = parts[1:] if parts[0] == "asgi_llm" else parts
    return ".".join(("asgi_llm", *parts))


def named_in_doc() -> set[str]:
    modules = {module for span in _backticked(TEXT) if (module := _as_module(span)) is not None}
    return modules | set(_doc_table())


def top_level_modules() -> Iterator[str]:
    """Every module and package right below `asgi_llm`, `adapters/` and `contrib/`."""
    for package, folder in SOURCES.items():
        for path in sorted(folder.iterdir()):
            if path.suffix == ".py" and path.name != "__init__.py":
                yield f"{package}.{path.stem}"
            elif path.is_dir() and (path / "__init__.py").exists():
                yield f"{package}.{path.name}"


def _exists(span: str) -> bool:
    if "/" in span.removesuffix("/"):
        return any((base / span).exists() for base in (ROOT, ROOT / "asgi_llm"))
    found = (path for folder in (*SOURCES.values(), ROOT / "benchmarks") for path in folder.rglob(span.removesuffix("/")))
    return (ROOT / span).exists() or next(found, None) is not None


def test_the_import_table_is_found() -> None:
    assert {"asgi_llm.core", "asgi_llm.app", "asgi_llm.contrib"} <= set(_doc_table())


@pytest.mark.parametrize("row", sorted(MAY_IMPORT))
def test_every_row_of_may_import_is_in_architecture_md(row: str) -> None:
    rows = _doc_table()
    assert row in rows, f"ARCHITECTURE.md's import table has no row for `{row}`: add one (what it owns, what it may import)"
    assert rows[row] == set(MAY_IMPORT[row]), f"ARCHITECTURE.md says `{row}` may import {sorted(rows[row])}"


def test_architecture_md_has_no_row_the_table_lacks() -> None:
    assert set(_doc_table()) - set(MAY_IMPORT) == set()


@pytest.mark.parametrize("module", list(top_level_modules()))
def test_every_top_level_module_is_named_in_architecture_md(module: str) -> None:
    assert module in named_in_doc(), f"ARCHITECTURE.md never names `{module}` (say where it belongs)"


def test_every_file_architecture_md_names_exists() -> None:
    paths = [span for span in _backticked(TEXT) if re.fullmatch(r"[\w.][\w./-]*(\.py|\.md|/)", span)]
    assert paths and [path for path in paths if not _exists(path)] == []


def test_code_cites_architecture_md() -> None:
    """The design notes the code may cite are in this repository: ARCHITECTURE.md."""
    outside = "DESIGN" + ".md"
    citing = [
        str(path.relative_to(ROOT))
        for folder in ("asgi_llm", "adapters", "contrib", "tests", "benchmarks", "examples")
        for path in sorted((ROOT / folder).rglob("*.py"))
        if outside in path.read_text(encoding="utf-8")
    ]
    assert citing == []
