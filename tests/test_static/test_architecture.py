"""The import direction of DESIGN.md, enforced by walking every module's imports."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = {"asgi_llm": ROOT / "asgi_llm", "asgi_llm.adapters": ROOT / "adapters", "asgi_llm.contrib": ROOT / "contrib"}
STDLIB_ONLY_EXCEPT: dict[str, set[str]] = {}


def modules() -> Iterator[tuple[str, Path]]:
    for package, folder in SOURCES.items():
        for path in sorted(folder.rglob("*.py")):
            parts = path.relative_to(folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            if package == "asgi_llm" and parts and parts[0] in ("adapters", "contrib"):
                continue
            yield ".".join((package, *parts)), path


def imports(name: str, path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                base = base if is_package else base[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
                found.add(target)
                if not node.module:
                    found.update(f"{target}.{alias.name}" for alias in node.names)
            else:
                found.add(node.module or "")
    return found


ALL = dict(modules())
GRAPH = {name: imports(name, path) for name, path in ALL.items()}


def importers_of(prefix: str) -> set[str]:
    return {name for name, deps in GRAPH.items() if any(d == prefix or d.startswith(prefix + ".") for d in deps)}


def test_modules_were_found() -> None:
    assert "asgi_llm.core.requests" in GRAPH and "asgi_llm.adapters.openai_chat" in GRAPH


@pytest.mark.parametrize("name", sorted(n for n in GRAPH if n.startswith("asgi_llm.core")))
def test_core_knows_no_wire_format_or_io(name: str) -> None:
    third_party = {d.split(".")[0] for d in GRAPH[name]} - {"asgi_llm", "__future__"}
    import sys

    assert third_party <= set(sys.stdlib_module_names), f"{name} imports {third_party}"
    internal = {d for d in GRAPH[name] if d.startswith("asgi_llm")}
    assert all(d.startswith("asgi_llm.core") or d == "asgi_llm" for d in internal), internal


@pytest.mark.parametrize("name", sorted(n for n in GRAPH if n.startswith("asgi_llm.adapters")))
def test_adapters_depend_on_the_core_only(name: str) -> None:
    internal = {d for d in GRAPH[name] if d.startswith("asgi_llm") and not d.startswith("asgi_llm.adapters")}
    assert all(d.startswith("asgi_llm.core") for d in internal), f"{name} imports {internal}"


@pytest.mark.parametrize("name", sorted(n for n in GRAPH if n.startswith("asgi_llm.engines")))
def test_engines_never_reach_up(name: str) -> None:
    internal = {d for d in GRAPH[name] if d.startswith("asgi_llm") and not d.startswith("asgi_llm.engines")}
    assert all(d.startswith(("asgi_llm.core", "asgi_llm.config")) for d in internal), f"{name} imports {internal}"


def test_only_the_engine_package_imports_llama_cpp() -> None:
    importers = importers_of("llama_cpp")
    assert importers and all(name.startswith("asgi_llm.engines.llamacpp.") for name in importers), importers


def test_only_the_upstream_engine_imports_httpx() -> None:
    assert importers_of("httpx") == {"asgi_llm.engines.upstream"}


def test_only_contrib_imports_host_frameworks() -> None:
    for framework in ("django", "litestar"):
        assert all(n.startswith("asgi_llm.contrib") for n in importers_of(framework))


def test_the_app_is_imported_only_from_the_top() -> None:
    allowed = {"asgi_llm", "asgi_llm.cli"}
    assert {n for n in importers_of("asgi_llm.app") if not n.startswith("asgi_llm.contrib")} <= allowed


def test_pool_and_endpoint_do_not_import_the_app() -> None:
    for name in ("asgi_llm.pool", "asgi_llm.endpoint", "asgi_llm.config"):
        assert not any(d.startswith("asgi_llm.app") for d in GRAPH[name])
