"""Golden cases: one folder per case under `golden/<adapter>/`, found at collection time.

A test that takes a `<adapter>_case` argument (say `openai_chat_case`) runs once per
case folder of that adapter and receives the folder's path.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

GOLDEN = Path(__file__).parent / "golden"


def golden_cases(adapter: str) -> list[Path]:
    return sorted(p for p in (GOLDEN / adapter).iterdir() if p.is_dir())


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    for name in metafunc.fixturenames:
        if name.endswith("_case") and (GOLDEN / name.removesuffix("_case")).is_dir():
            cases = golden_cases(name.removesuffix("_case"))
            metafunc.parametrize(name, cases, ids=[c.name for c in cases])


def _split_sse(data: bytes) -> list[str]:
    """The `data:` payloads of an SSE body, checking the framing our encoders promise."""
    assert data.endswith(b"\n\n"), data[-40:]
    events = data[:-2].split(b"\n\n")
    assert all(e.startswith(b"data: ") and b"\n" not in e for e in events), events
    return [e.removeprefix(b"data: ").decode("utf-8") for e in events]


@pytest.fixture
def parse_sse() -> Callable[[bytes], list[str]]:
    return _split_sse
