"""The manual (docs/, MkDocs with mkdocs-material) builds with `--strict`: a broken link, anchor,
include, nav entry or page left out of the nav fails the suite, as it would fail the site's build.
And it is a whole reference: every configuration option is named in it.

Run as a subprocess, as `mkdocs build` is run: importing MkDocs here would bring its
deprecation warnings into a suite where warnings are errors.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import BaseModel

from asgi_llm import config

ROOT = Path(__file__).resolve().parents[2]
MANUAL = "\n".join(path.read_text(encoding="utf-8") for path in sorted((ROOT / "docs").rglob("*.md")))
OPTIONS = sorted(
    (model.__name__, field)
    for model in vars(config).values()
    if isinstance(model, type) and issubclass(model, BaseModel) and model.__module__.startswith(f"{config.__name__}.")
    for field in model.model_fields
)


@pytest.mark.slow  # mkdocs builds every page
def test_the_manual_builds_strictly(tmp_path: Path) -> None:
    site = tmp_path / "site"
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", "mkdocs.yml", "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        check=False,
    )
    assert built.returncode == 0, built.stderr
    assert (site / "index.html").exists() and (site / "configuration" / "index.html").exists()


@pytest.mark.parametrize(("model", "option"), OPTIONS)
def test_every_configuration_option_is_in_the_manual(model: str, option: str) -> None:
    assert re.search(rf"`{option}[` =]", MANUAL), f"{model}.{option} is in no page of docs/"


def _anchors(page: Path) -> set[str]:
    """The ids MkDocs gives a page's headings (Python-Markdown's default slugs)."""
    headings = re.findall(r"^#+ (.+)$", page.read_text(encoding="utf-8"), re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", heading.lower()).strip().replace(" ", "-") for heading in headings}


def test_the_links_of_the_front_page_and_architecture_md_lead_somewhere() -> None:
    """README.md and ARCHITECTURE.md are read outside the site (GitHub, PyPI), so MkDocs checks none
    of their links: every relative link names a file that exists, and a heading it has."""
    broken = []
    for page in (ROOT / "README.md", ROOT / "ARCHITECTURE.md"):
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text(encoding="utf-8")):
            path, _, anchor = target.partition("#")
            if "://" in target:
                continue
            linked = (ROOT / path) if path else page
            if not linked.exists() or (anchor and anchor not in _anchors(linked)):
                broken.append(f"{page.name}: {target}")
    assert broken == []
