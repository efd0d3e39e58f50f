"""The import direction of ARCHITECTURE.md, enforced by walking every module's imports.

One table says, for each package prefix, which of our prefixes its modules may import; a module
is judged by the longest prefix that names it, and anything the table does not allow is denied.
The core and the adapters also have allow-lists for what they import from outside.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = {"asgi_llm": ROOT / "asgi_llm", "asgi_llm.adapters": ROOT / "adapters", "asgi_llm.contrib": ROOT / "contrib"}

_ADAPTER_SHARED = (
    "asgi_llm.core",
    "asgi_llm.adapters.base",
    "asgi_llm.adapters.wire_checks",
    "asgi_llm.adapters.json_output",
    "asgi_llm.adapters.logprobs",
    "asgi_llm.adapters.images",
)

MAY_IMPORT: dict[str, tuple[str, ...]] = {
    "asgi_llm": ("asgi_llm.app", "asgi_llm.client", "asgi_llm.config", "asgi_llm.middleware", "asgi_llm.pool"),
    "asgi_llm.core": ("asgi_llm.core",),
    "asgi_llm.http": ("asgi_llm.core", "asgi_llm.http", "asgi_llm.wire"),
    "asgi_llm.storage": ("asgi_llm.core", "asgi_llm.storage"),
    "asgi_llm.wire": (),
    # the settings' schema, split by concern; the parts below read plain data and import nothing of ours
    "asgi_llm.config": ("asgi_llm.config",),
    "asgi_llm.config.lora": (),
    "asgi_llm.config.sources": (),
    "asgi_llm.config.chains": (),
    "asgi_llm.logs": (),
    # the leaves every layer may lean on (tasks that outlive their caller, OpenTelemetry's API)
    "asgi_llm.support": (),
    "asgi_llm.middleware": ("asgi_llm.core", "asgi_llm.http", "asgi_llm.storage", "asgi_llm.middleware"),
    # Redis and PostgreSQL behind the layers' own protocols (the `Gate`, `BudgetStore`, `Verifier`, `StateStore`)
    "asgi_llm.shared": (
        "asgi_llm.core",
        "asgi_llm.middleware",
        "asgi_llm.shared",
        "asgi_llm.support.clients",
        "asgi_llm.support.tasks",
    ),
    "asgi_llm.middleware.tracing": ("asgi_llm.http", "asgi_llm.support.otel"),
    "asgi_llm.adapters": _ADAPTER_SHARED,
    "asgi_llm.adapters.openai": (*_ADAPTER_SHARED, "asgi_llm.wire", "asgi_llm.adapters.openai"),
    "asgi_llm.adapters.anthropic": (*_ADAPTER_SHARED, "asgi_llm.adapters.anthropic"),
    "asgi_llm.adapters.ollama": (*_ADAPTER_SHARED, "asgi_llm.adapters.ollama"),
    "asgi_llm.engines": ("asgi_llm.core", "asgi_llm.config", "asgi_llm.engines.inference_thread"),
    "asgi_llm.engines.decoding": ("asgi_llm.core", "asgi_llm.engines.decoding"),
    # the llama.cpp engine's pure parts: scheduling and bookkeeping that never call the model
    "asgi_llm.engines.llamacpp.prompt_cache": (),
    "asgi_llm.engines.llamacpp.prompt_files": ("asgi_llm.engines.llamacpp.prompt_cache",),
    "asgi_llm.engines.llamacpp.jobs": (
        "asgi_llm.core",
        "asgi_llm.engines.llamacpp.batching",
        "asgi_llm.engines.llamacpp.lookup",
        "asgi_llm.engines.llamacpp.draft_payoff",
    ),
    "asgi_llm.engines.llamacpp.cache_reading": (
        "asgi_llm.engines.llamacpp.jobs",
        "asgi_llm.engines.llamacpp.prompt_cache",
        "asgi_llm.engines.llamacpp.prompt_files",
        "asgi_llm.engines.llamacpp.batching",
    ),
    "asgi_llm.engines.llamacpp.batching": (
        "asgi_llm.core",
        "asgi_llm.engines.llamacpp.batch_plan",
        "asgi_llm.engines.llamacpp.jobs",
        "asgi_llm.engines.llamacpp.cache_reading",
        "asgi_llm.engines.llamacpp.media_reading",
        "asgi_llm.engines.llamacpp.prompt_cache",
        "asgi_llm.engines.llamacpp.prompt_files",
        "asgi_llm.engines.llamacpp.speculation",
    ),
    "asgi_llm.engines.llamacpp.speculation": (
        "asgi_llm.engines.llamacpp.jobs",
        "asgi_llm.engines.llamacpp.draft_odds",
        "asgi_llm.engines.llamacpp.draft_payoff",
        "asgi_llm.engines.llamacpp.lookup",
        "asgi_llm.engines.llamacpp.reply_memory",
    ),
    "asgi_llm.engines.llamacpp.draft_odds": (),
    "asgi_llm.engines.llamacpp.draft_payoff": (),
    "asgi_llm.engines.llamacpp.lookup": ("asgi_llm.engines.llamacpp.reply_memory",),
    "asgi_llm.engines.llamacpp.reply_memory": (),
    "asgi_llm.engines.llamacpp.batch_plan": (
        "asgi_llm.engines.llamacpp.jobs",
        "asgi_llm.engines.llamacpp.prompt_cache",
        "asgi_llm.engines.llamacpp.batching",
    ),
    "asgi_llm.engines.llamacpp.media_reading": ("asgi_llm.engines.llamacpp.jobs",),
    "asgi_llm.engines.llamacpp.thread_governor": (),
    "asgi_llm.engines.llamacpp.core_load": ("asgi_llm.engines.llamacpp.thread_governor",),
    "asgi_llm.engines.upstream": (
        "asgi_llm.core",
        "asgi_llm.config",
        "asgi_llm.wire",
        "asgi_llm.engines.decoding",
        "asgi_llm.engines.upstream",
        "asgi_llm.support.otel",
        "asgi_llm.support.tasks",
    ),
    # the upstream engine's answers read without HTTP (only engine.py speaks HTTP)
    "asgi_llm.engines.upstream.reading": (
        "asgi_llm.core",
        "asgi_llm.engines.upstream.errors",
        "asgi_llm.engines.upstream.stream",
    ),
    "asgi_llm.engines.llamacpp": (
        "asgi_llm.core",
        "asgi_llm.config",
        "asgi_llm.engines.decoding",
        "asgi_llm.engines.inference_thread",
        "asgi_llm.engines.memory_estimate",
        "asgi_llm.engines.llamacpp",
        "asgi_llm.support.tasks",
    ),
    # the pool's parts, each on one concern; the package row is the composition (model_pool,
    # lifecycle, reload), the only part that makes engines
    "asgi_llm.pool": (
        "asgi_llm.core",
        "asgi_llm.config",
        "asgi_llm.engines.inference_thread",
        "asgi_llm.engines.llamacpp",
        "asgi_llm.engines.upstream",
        "asgi_llm.pool",
        "asgi_llm.support.clients",
        "asgi_llm.support.tasks",
    ),
    "asgi_llm.pool.entry": ("asgi_llm.core", "asgi_llm.config"),
    "asgi_llm.pool.roster": ("asgi_llm.core", "asgi_llm.config", "asgi_llm.pool.entry"),
    "asgi_llm.pool.residency": (
        "asgi_llm.core",
        "asgi_llm.config",
        "asgi_llm.engines.gguf_metadata",
        "asgi_llm.engines.memory_estimate",
        "asgi_llm.pool.entry",
        "asgi_llm.pool.roster",
        "asgi_llm.pool.report",
    ),
    "asgi_llm.pool.status": (
        "asgi_llm.core",
        "asgi_llm.pool.entry",
        "asgi_llm.pool.roster",
        "asgi_llm.pool.residency",
        "asgi_llm.pool.report",
    ),
    "asgi_llm.pool.report": (),
    "asgi_llm.openapi": ("asgi_llm.core", "asgi_llm.adapters.base"),
    "asgi_llm.web": ("asgi_llm.http", "asgi_llm.web"),
    "asgi_llm.client": ("asgi_llm.core", "asgi_llm.http"),
    # the request path: the package row is the endpoint's, its parts may not import it
    "asgi_llm.serving": (
        "asgi_llm.core",
        "asgi_llm.http",
        "asgi_llm.storage",
        "asgi_llm.adapters.base",
        "asgi_llm.pool",
        "asgi_llm.serving",
    ),
    "asgi_llm.serving.background": (
        "asgi_llm.core",
        "asgi_llm.http",
        "asgi_llm.adapters.base",
        "asgi_llm.pool",
        "asgi_llm.serving.images",
    ),
    "asgi_llm.serving.model_routes": (
        "asgi_llm.core",
        "asgi_llm.http",
        "asgi_llm.adapters.base",
        "asgi_llm.pool",
        "asgi_llm.serving.call",
        "asgi_llm.serving.images",
    ),
    # a request's images read before an engine sees them; the one fetch a request can cause
    "asgi_llm.serving.images": ("asgi_llm.core", "asgi_llm.config", "asgi_llm.serving.image_fetch"),
    "asgi_llm.serving.image_fetch": ("asgi_llm.core",),
    "asgi_llm.serving.call": ("asgi_llm.core", "asgi_llm.http", "asgi_llm.adapters.base", "asgi_llm.pool"),
    "asgi_llm.serving.fallback": ("asgi_llm.core", "asgi_llm.http.asgi", "asgi_llm.pool"),
    "asgi_llm.app": (
        "asgi_llm.core",
        "asgi_llm.config",
        "asgi_llm.http",
        "asgi_llm.storage",
        "asgi_llm.adapters.base",
        "asgi_llm.adapters.openai",
        "asgi_llm.client",
        "asgi_llm.middleware",
        "asgi_llm.serving.endpoint",
        "asgi_llm.logs",
        "asgi_llm.pool",
        "asgi_llm.openapi",
        "asgi_llm.stack",
        "asgi_llm.web",
        "asgi_llm.shared",
    ),
    "asgi_llm.stack": (
        "asgi_llm.config",
        "asgi_llm.http.asgi",
        "asgi_llm.middleware",
        "asgi_llm.pool",
        "asgi_llm.shared",
    ),
    # the command line: the package row is `serve`'s, above the composition root
    "asgi_llm.cli": (
        "asgi_llm.core",
        "asgi_llm.config",
        "asgi_llm.adapters",
        "asgi_llm.app",
        "asgi_llm.cli",
        "asgi_llm.engines.upstream",
        "asgi_llm.logs",
        "asgi_llm.middleware.sqlite_keys",
        "asgi_llm.pool.residency",
    ),
    "asgi_llm.cli.keys": ("asgi_llm.config", "asgi_llm.middleware", "asgi_llm.shared"),
    "asgi_llm.cli.watch": ("asgi_llm.support.tasks",),
    "asgi_llm.cli.progress": ("asgi_llm.support.tasks",),
    "asgi_llm.cli.otel_export": (),
    "asgi_llm.contrib": (
        "asgi_llm.config",
        "asgi_llm.http.asgi",
        "asgi_llm.adapters",
        "asgi_llm.middleware",
        "asgi_llm.app",
        "asgi_llm.contrib",
    ),
}
"""Package prefix → the prefixes its modules may import. Exact names for single modules."""

_PURE_STDLIB = frozenset(
    {"__future__", "abc", "base64", "collections", "copy", "dataclasses", "datetime", "enum", "functools", "hashlib"}
    | {"itertools", "json", "math", "re", "string", "struct", "time", "typing", "uuid"}
)
OUTSIDE_ALLOWED: dict[str, frozenset[str]] = {
    "asgi_llm.core": _PURE_STDLIB - {"json", "time", "uuid", "base64", "hashlib", "struct"},
    "asgi_llm.adapters": _PURE_STDLIB | {"pydantic", "jsonschema"},
    "asgi_llm.wire": frozenset({"__future__", "typing"}),
}
"""What the core and the adapters may import from outside the project: pure computation only,
no I/O, no web framework, no engine."""


def modules() -> Iterator[tuple[str, Path]]:
    for package, folder in SOURCES.items():
        for path in sorted(folder.rglob("*.py")):
            parts = path.relative_to(folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
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


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _longest(name: str, table: dict[str, object]) -> str | None:
    matches = [prefix for prefix in table if _within(name, prefix) and (prefix != "asgi_llm" or name == "asgi_llm")]
    return max(matches, key=len, default=None)


def violations(name: str, deps: set[str]) -> list[str]:
    """Every import of `name`'s that the table does not allow."""
    rule = _longest(name, MAY_IMPORT)
    if rule is None:
        return [f"{name} has no row in MAY_IMPORT"]
    found = [
        f"{name} → {dep}"
        for dep in sorted(deps)
        if _within(dep, "asgi_llm") and not any(_within(dep, allowed) for allowed in MAY_IMPORT[rule])
    ]
    outside_rule = _longest(name, OUTSIDE_ALLOWED)
    if outside_rule is not None:
        allowed_outside = OUTSIDE_ALLOWED[outside_rule]
        found += [
            f"{name} → {dep} (outside its allow-list)"
            for dep in sorted(deps)
            if not _within(dep, "asgi_llm") and dep.split(".")[0] not in allowed_outside
        ]
    return found


ALL = dict(modules())
GRAPH = {name: imports(name, path) for name, path in ALL.items()}


def importers_of(prefix: str) -> set[str]:
    return {name for name, deps in GRAPH.items() if any(_within(d, prefix) for d in deps)}


def test_modules_were_found() -> None:
    assert {"asgi_llm.core.requests", "asgi_llm.adapters.openai.chat", "asgi_llm.contrib.django.asgi"} <= set(GRAPH)


@pytest.mark.parametrize("name", sorted(GRAPH))
def test_every_import_follows_the_table(name: str) -> None:
    assert violations(name, GRAPH[name]) == []


@pytest.mark.parametrize(
    ("name", "injected"),
    [
        ("asgi_llm.middleware.auth", "asgi_llm.pool"),
        ("asgi_llm.middleware.usage", "asgi_llm.adapters.openai.chat"),
        ("asgi_llm.middleware.limits", "asgi_llm.adapters.base"),
        ("asgi_llm.core.requests", "asgi_llm"),
        ("asgi_llm.core.events", "sqlite3"),
        ("asgi_llm.core.errors", "socket"),
        ("asgi_llm.core.engine", "asgi_llm.http.asgi"),
        ("asgi_llm.adapters.openai.chat", "starlette.responses"),
        ("asgi_llm.adapters.base", "httpx"),
        ("asgi_llm.adapters.anthropic.messages", "asgi_llm.adapters.openai.common"),
        ("asgi_llm.adapters.ollama.chat", "asgi_llm.adapters.anthropic"),
        ("asgi_llm.app", "asgi_llm.contrib.django"),
        ("asgi_llm.engines.fake", "asgi_llm.contrib"),
        ("asgi_llm.http.context", "asgi_llm.adapters.base"),
        ("asgi_llm.engines.decoding.grammar", "asgi_llm.engines.llamacpp"),
        ("asgi_llm.engines.upstream.engine", "asgi_llm.pool"),
        ("asgi_llm.pool.status", "asgi_llm.pool.lifecycle"),
        ("asgi_llm.pool.residency", "asgi_llm.pool.lifecycle"),
        ("asgi_llm.pool.entry", "asgi_llm.engines.llamacpp"),
        ("asgi_llm.engines.upstream.reading", "asgi_llm.engines.upstream.engine"),
        ("asgi_llm.config.sources", "asgi_llm.config.model"),
        ("asgi_llm.config.model", "asgi_llm.pool"),
        ("asgi_llm.serving.fallback", "asgi_llm.serving.endpoint"),
        ("asgi_llm.serving.endpoint", "asgi_llm.app"),
        ("asgi_llm.support.tasks", "asgi_llm.pool"),
        ("asgi_llm.pool.lifecycle", "asgi_llm.app"),
        ("asgi_llm.cli.watch", "asgi_llm.cli.serve"),
        ("asgi_llm.stack", "asgi_llm.app"),
        ("asgi_llm.wire.openai_chat", "asgi_llm.core"),
        ("asgi_llm.adapters.anthropic.messages", "asgi_llm.wire.openai_chat"),
    ],
)
def test_a_forbidden_import_is_caught(name: str, injected: str) -> None:
    """The table denies what ARCHITECTURE.md forbids: each edge, added to a real module, fails it."""
    assert violations(name, GRAPH[name]) == []
    assert violations(name, GRAPH[name] | {injected}) != []


def _part(name: str) -> str:
    """Where a module stands in the tree: `asgi_llm` for the package's root (its `__init__` and the
    modules beside it), else the top-level package it is in (`asgi_llm.pool`, `asgi_llm.adapters`)."""
    parts = name.split(".")
    if len(parts) < 2 or (ROOT / "asgi_llm" / f"{parts[1]}.py").exists():
        return "asgi_llm"
    return ".".join(parts[:2])


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every cycle through two or more parts, each once, found from its smallest part."""
    found: list[list[str]] = []

    def walk(path: list[str]) -> None:
        for after in sorted(edges.get(path[-1], ())):
            if after == path[0]:
                found.append(path)
            elif after not in path and after > path[0]:
                walk([*path, after])

    for start in sorted(edges):
        walk([start])
    return found


def test_the_root_and_the_packages_import_without_cycles() -> None:
    """A package below the root never imports a module at the root that imports it back (the
    settings, tasks and OpenTelemetry's API were root modules that the pool, the engines, the
    layers and the shared backends imported): the root composes its packages, never serves them."""
    edges: dict[str, set[str]] = {}
    for name, deps in GRAPH.items():
        ours = {_part(dep) for dep in deps if _within(dep, "asgi_llm")}
        edges.setdefault(_part(name), set()).update(ours - {_part(name)})
    assert {"asgi_llm.pool", "asgi_llm.config"} <= edges["asgi_llm"]
    assert _cycles(edges) == []
    assert _cycles({**edges, "asgi_llm.pool": edges["asgi_llm.pool"] | {"asgi_llm"}}) != []


def test_a_module_outside_the_table_is_refused() -> None:
    assert violations("asgi_llm_extra.thing", set()) == ["asgi_llm_extra.thing has no row in MAY_IMPORT"]


def test_core_imports_from_the_standard_library_only() -> None:
    assert OUTSIDE_ALLOWED["asgi_llm.core"] <= set(sys.stdlib_module_names) | {"__future__"}


def test_only_the_engine_package_imports_llama_cpp() -> None:
    importers = importers_of("llama_cpp")
    assert importers and all(name.startswith("asgi_llm.engines.llamacpp.") for name in importers), importers


def test_only_the_upstream_engine_and_the_image_fetch_import_httpx() -> None:
    """The engine's requests and its discovery of an upstream's models: the HTTP side, in two modules;
    and a remote image's fetch from an allowed host, imported when one is fetched (the `upstream`
    extra; tests/test_root/test_without_extras.py runs the rest without it)."""
    assert importers_of("httpx") == {
        "asgi_llm.engines.upstream.engine",
        "asgi_llm.engines.upstream.discovery",
        "asgi_llm.serving.image_fetch",
    }


def test_only_otel_imports_opentelemetry() -> None:
    """A mounted app touches OpenTelemetry's API only, in one place; the SDK only for `asgi-llm serve`."""
    assert importers_of("opentelemetry") == {"asgi_llm.support.otel", "asgi_llm.cli.otel_export"}


def test_only_contrib_imports_host_frameworks() -> None:
    for framework in ("django", "litestar"):
        importers = importers_of(framework)
        assert importers and all(n.startswith("asgi_llm.contrib") for n in importers), importers


@pytest.mark.parametrize(
    ("package", "importers"),
    [
        ("starlette", {"asgi_llm.cli.serve"}),
        ("uvicorn", {"asgi_llm.cli.serve"}),
        ("uvloop", set()),
        ("httptools", set()),
    ],
)
def test_the_server_is_only_the_standalone_servers(package: str, importers: set[str]) -> None:
    """The `serve` extra, which a host mounting the app does not install, is `asgi-llm serve`'s
    alone (uvicorn picks up uvloop and httptools by itself)."""
    assert importers_of(package) == importers
