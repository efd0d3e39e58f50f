"""ruff finds nothing: its default rules, import order (I) and sorted `__all__` lists (RUF022),
as configured in pyproject.toml. Fix with `.venv/bin/ruff check --fix`, the rest by hand.

Run as a subprocess, as CI's linters are: ruff is a binary, and its findings print as it writes them.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHECKED = ("asgi_llm", "adapters", "contrib", "tests", "benchmarks", "examples")


def test_ruff_finds_nothing() -> None:
    found = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", *CHECKED],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert found.returncode == 0, found.stdout + found.stderr
