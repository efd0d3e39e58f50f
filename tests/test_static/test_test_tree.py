"""tests/ mirrors the source tree: each `tests/test_<name>/` folder holds the tests of the package or
module named `<name>` (`test_decoding/` for `asgi_llm/engines/decoding/`, `test_adapters/` for
`adapters/`, installed as `asgi_llm.adapters`), so a module's tests are found by its name. A test
goes with its main subject: the module whose behaviour it checks, not the ones it goes through.

The few folders that hold what cuts across the tree are named in `CROSS_CUTTING`, each with why;
no test module sits at tests/'s root (tests/conftest.py and the folders only)."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
SOURCE_FOLDERS = (ROOT / "asgi_llm", ROOT / "adapters", ROOT / "contrib")

CROSS_CUTTING = {
    "test_e2e": "end to end through real servers, the official SDKs and the packaged model: each test crosses"
    " the whole stack (HTTP, adapters, serving, pool, an engine), so it has no one module to mirror",
    "test_static": "checks that read the source tree itself (the import table, sizes, coupling, loggers,"
    " ruff, docs, packaging, this mirror), not the behaviour of any one module",
    "test_root": "the composition root: the modules at the package's root (app.py, stack.py, client.py,"
    " openapi.py, logs.py) and the package's own imports; `test_app` would name app.py alone",
}


@cache
def source_names() -> set[str]:
    """Every package and module name of the installed tree: `asgi_llm`'s, `adapters/`' and `contrib/`'s."""
    names = {folder.name for folder in SOURCE_FOLDERS}
    for folder in SOURCE_FOLDERS:
        for path in folder.rglob("*.py"):
            if path.name == "__init__.py":
                names.add(path.parent.name)
            elif not path.name.startswith("_"):
                names.add(path.stem)
    return names


def folders_of_tests() -> list[Path]:
    return sorted(p for p in TESTS.glob("test_*") if p.is_dir())


@pytest.mark.parametrize("folder", folders_of_tests(), ids=lambda p: p.name)
def test_each_test_folder_names_a_package_or_module_or_says_why_not(folder: Path) -> None:
    name = folder.name.removeprefix("test_")
    assert name in source_names() or folder.name in CROSS_CUTTING, (
        f"tests/{folder.name}/ names no package or module of asgi_llm, adapters/ or contrib/: name it after"
        " the one its tests check (tests/test_<name>/), or say why it cuts across in CROSS_CUTTING"
        " (tests/test_static/test_test_tree.py)"
    )


@pytest.mark.parametrize("folder", sorted(CROSS_CUTTING))
def test_each_cross_cutting_folder_exists_and_mirrors_nothing(folder: str) -> None:
    assert (TESTS / folder).is_dir(), f"tests/{folder}/ is gone: drop it from CROSS_CUTTING"
    assert folder.removeprefix("test_") not in source_names(), f"tests/{folder}/ mirrors a module: no exception"


def test_no_test_module_sits_at_the_root_of_tests() -> None:
    assert sorted(p.name for p in TESTS.glob("*.py")) == ["conftest.py"]
