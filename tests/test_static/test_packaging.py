"""The wheel adds exactly one import name, the public API is explicit, and strict typing holds."""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", str(out), str(ROOT)],
        check=True,
        capture_output=True,
    )
    (built,) = out.glob("asgi_llm-*.whl")
    yield built


@pytest.mark.slow  # `wheel` builds it
def test_wheel_installs_one_top_level_name(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top == {"asgi_llm"}
    assert "asgi_llm/py.typed" in names


SOURCE_FOLDERS = {"asgi_llm": ROOT / "asgi_llm", "asgi_llm/adapters": ROOT / "adapters", "asgi_llm/contrib": ROOT / "contrib"}


@pytest.mark.slow
def test_the_wheel_holds_every_module_of_the_source_tree(wheel: Path) -> None:
    """pyproject's explicit `packages` list must name every package: one left out ships a wheel
    that imports fine here (the editable install maps folders) and breaks once installed."""
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {
        f"{prefix}/{path.relative_to(folder).as_posix()}"
        for prefix, folder in SOURCE_FOLDERS.items()
        for path in folder.rglob("*.py")
    }
    assert {"asgi_llm/adapters/openai/chat.py", "asgi_llm/contrib/django/migrations/0001_initial.py"} <= expected
    assert expected - names == set()


@pytest.mark.slow
def test_the_wheel_holds_the_web_pages_files(wheel: Path) -> None:
    """The page's HTML, CSS and JavaScript are package data: without them `/ui` is a 500 once installed."""
    names = set(zipfile.ZipFile(wheel).namelist())
    static = {path.name for path in (ROOT / "asgi_llm" / "web").iterdir() if path.suffix in (".html", ".css", ".js")}
    assert static == {"index.html", "app.js", "style.css"}
    assert {f"asgi_llm/web/{name}" for name in static} <= names


@pytest.mark.parametrize("name", ["adapters", "contrib"])
def test_repo_folders_are_not_importable_top_level(name: str) -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(name)


@pytest.mark.parametrize("module", ["asgi_llm", "asgi_llm.core"])
def test_all_is_complete_and_resolvable(module: str) -> None:
    mod = importlib.import_module(module)
    exported = set(mod.__all__)
    public = {n for n, v in vars(mod).items() if not n.startswith("_") and not isinstance(v, type(os))}
    public.discard("annotations")
    assert exported == public
    for name in exported:
        assert getattr(mod, name) is not None


@pytest.mark.slow  # and mypy reads all of it (9 s cold; under a second from its cache)
def test_strict_typing(wheel: Path) -> None:
    """mypy can't see through the editable hook, so it checks an installed copy: unpacked at the
    same place each run, beside mypy's cache (.mypy_cache/, ignored by git), so that only the
    modules that changed are checked again."""
    copy = ROOT / ".mypy_cache" / "strict-wheel"
    shutil.rmtree(copy, ignore_errors=True)
    zipfile.ZipFile(wheel).extractall(copy)
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(copy.with_name("strict-cache")), "-p", "asgi_llm"],
        cwd=copy,
        env={**os.environ, "MYPYPATH": str(copy)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
