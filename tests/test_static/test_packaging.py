"""The wheel adds exactly one import name, the public API is explicit, and strict typing holds."""

from __future__ import annotations

import importlib
import os
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


def test_wheel_installs_one_top_level_name(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top == {"asgi_llm"}
    assert "asgi_llm/py.typed" in names
    assert "asgi_llm/adapters/openai_chat.py" in names
    assert "asgi_llm/contrib/django/__init__.py" in names
    assert "asgi_llm/contrib/django/migrations/0001_initial.py" in names
    assert "asgi_llm/contrib/django/management/commands/create_llm_key.py" in names


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


def test_strict_typing(wheel: Path, tmp_path: Path) -> None:
    """mypy can't see through the editable hook, so it checks an installed copy."""
    zipfile.ZipFile(wheel).extractall(tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "-p", "asgi_llm"],
        cwd=tmp_path,
        env={**os.environ, "MYPYPATH": str(tmp_path)},
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
