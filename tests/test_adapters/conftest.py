"""Golden cases: one folder per case under `golden/<adapter>/`, found at collection time.

A test that takes a `<adapter>_case` argument (say `openai_chat_case`) runs once per
case folder of that adapter and receives the folder's path. The fixtures below read a
case's inputs and check its expected outputs; with `UPDATE_GOLDEN=1` the checks rewrite
the expected outputs instead, then read the diff.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from asgi_llm import core
from asgi_llm.adapters.base import Parsed

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"

CheckOutputs = Callable[[Path, Parsed[Any, Any], Any, bytes | None], None]


def golden_cases(adapter: str) -> list[Path]:
    return sorted(p for p in (GOLDEN / adapter).iterdir() if p.is_dir())


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    for name in metafunc.fixturenames:
        if name.endswith("_case") and (GOLDEN / name.removesuffix("_case")).is_dir():
            cases = golden_cases(name.removesuffix("_case"))
            metafunc.parametrize(name, cases, ids=[c.name for c in cases])


# -- reading and checking case files ---------------------------------------------------------------------


def _load(case: Path, name: str) -> Any:
    return json.loads((case / name).read_text(encoding="utf-8"))


def _check_json(case: Path, name: str, actual: Any) -> None:
    actual = json.loads(json.dumps(actual, default=_bytes_text))  # tuples → lists, as the wire sees it
    path = case / name
    if UPDATE:
        path.write_text(json.dumps(actual, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    assert path.is_file(), f"missing golden {path}; run with UPDATE_GOLDEN=1"
    assert actual == _load(case, name)


def _bytes_text(value: Any) -> str:
    """An image's bytes in a parsed request (empty until the server reads them), as text."""
    if isinstance(value, bytes):
        return value.decode("latin-1")
    raise TypeError(f"{type(value).__name__} is not JSON")


def _check_bytes(case: Path, name: str, actual: bytes) -> None:
    path = case / name
    if UPDATE:
        path.write_bytes(actual)
    assert path.is_file(), f"missing golden {path}; run with UPDATE_GOLDEN=1"
    assert actual == path.read_bytes()


def _parsed_json(parsed: Parsed[Any, Any]) -> dict[str, Any]:
    options = parsed.options
    if dataclasses.is_dataclass(options) and not isinstance(options, type):
        options = dataclasses.asdict(options)
    return {
        "request": dataclasses.asdict(parsed.request),
        "stream": parsed.stream,
        "options": options,
        "keep_alive": parsed.keep_alive,
        "load_only": parsed.load_only,
    }


def _check_outputs(case: Path, parsed: Parsed[Any, Any], response: Any, stream: bytes | None) -> None:
    _check_json(case, "parsed.json", _parsed_json(parsed))
    _check_json(case, "response.json", response)
    if stream is not None:
        _check_bytes(case, "stream.txt", stream)


@pytest.fixture
def golden() -> SimpleNamespace:
    """Every case-file helper in one object, for modules that pass them around."""
    return SimpleNamespace(
        load=_load,
        check_json=_check_json,
        check_bytes=_check_bytes,
        parsed_json=_parsed_json,
        events=_events,
        catalog=_catalog,
    )


@pytest.fixture
def load_json() -> Callable[[Path, str], Any]:
    """`load_json(case, "request.json")`: one JSON file of a case."""
    return _load


@pytest.fixture
def check_json() -> Callable[[Path, str, Any], None]:
    """`check_json(case, "response.json", actual)`: `actual`, as JSON, equals the golden file."""
    return _check_json


@pytest.fixture
def check_bytes() -> Callable[[Path, str, bytes], None]:
    """`check_bytes(case, "stream.txt", actual)`: `actual` equals the golden file byte for byte."""
    return _check_bytes


@pytest.fixture
def check_outputs() -> CheckOutputs:
    """`check_outputs(case, parsed, response, stream)`: `parsed.json`, `response.json` and `stream.txt` at once.

    `parsed` is what the adapter's `parse` returned; `stream` is None where a case has no stream.
    """
    return _check_outputs


# -- the core values behind the cases ------------------------------------------------------------------


def _logprob(raw: dict[str, Any]) -> core.TokenLogprob:
    top = tuple(core.TopLogprob(t["token"], t["logprob"], t["token"].encode()) for t in raw.get("top", ()))
    return core.TokenLogprob(raw["token"], raw["logprob"], raw["token"].encode(), top)


def _event(raw: dict[str, Any]) -> core.GenerationEvent:
    kind, index, call = raw["type"], raw.get("index", 0), raw.get("call_index", 0)
    if kind == "text":
        return core.TextDelta(raw["text"], index, tuple(_logprob(t) for t in raw.get("logprobs", ())))
    if kind == "reasoning":
        return core.ReasoningDelta(raw["text"], index)
    if kind == "tool_start":
        return core.ToolCallStart(raw["id"], raw["name"], index, call)
    if kind == "tool_delta":
        return core.ToolCallDelta(raw["arguments"], index, call)
    if kind == "tool_end":
        return core.ToolCallEnd(index, call)
    return core.Finish(raw["reason"], core.Usage(**raw["usage"]), index, raw.get("stop_sequence"))


def _events(raw: Sequence[dict[str, Any]]) -> list[core.GenerationEvent]:
    return [_event(e) for e in raw]


def _catalog(adapter: str) -> list[core.ModelCard]:
    raw = _load(GOLDEN / adapter, "catalog.json")
    return [
        core.ModelCard(
            **{
                **card,
                "aliases": tuple(card["aliases"]),
                "embedding_dimensions": tuple(card.get("embedding_dimensions", ())),
                "facts": core.ModelFacts(**card.get("facts", {})),
            }
        )
        for card in raw
    ]


@pytest.fixture
def core_events() -> Callable[[Sequence[dict[str, Any]]], list[core.GenerationEvent]]:
    """The core events an `events.json` lists: `text`, `reasoning`, `tool_start|delta|end`, else a finish."""
    return _events


@pytest.fixture
def load_catalog() -> Callable[[str], list[core.ModelCard]]:
    """`load_catalog("openai_models")`: the model cards in `golden/<adapter>/catalog.json`."""
    return _catalog


# -- stream framing ------------------------------------------------------------------------------------


def _split_sse(data: bytes) -> list[str]:
    """The `data:` payloads of an SSE body, checking the framing our encoders promise."""
    assert data.endswith(b"\n\n"), data[-40:]
    events = data[:-2].split(b"\n\n")
    assert all(e.startswith(b"data: ") and b"\n" not in e for e in events), events
    return [e.removeprefix(b"data: ").decode("utf-8") for e in events]


def _split_named_sse(data: bytes) -> list[dict[str, Any]]:
    """The payloads of a named-event SSE body, checking each `event:` line names its payload's type."""
    assert data.endswith(b"\n\n") and b"[DONE]" not in data, data[-40:]
    payloads = []
    for block in data[:-2].decode("utf-8").split("\n\n"):
        event_line, data_line = block.split("\n")
        assert data_line.startswith("data: "), block
        payload = json.loads(data_line.removeprefix("data: "))
        assert event_line == f"event: {payload['type']}"
        payloads.append(payload)
    return payloads


@pytest.fixture
def parse_sse() -> Callable[[bytes], list[str]]:
    return _split_sse


@pytest.fixture
def parse_named_sse() -> Callable[[bytes], list[dict[str, Any]]]:
    return _split_named_sse
