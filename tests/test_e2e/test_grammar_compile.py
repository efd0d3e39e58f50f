"""A schema's compile stalls no other stream: it runs on a worker thread, not on the inference
thread that steps every stream of the pool, and the request that brought it waits for it alone."""

from __future__ import annotations

import itertools
import json
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import jsonschema
import pytest

from asgi_llm.engines.decoding import compiled

from .conftest import MODEL, Server

pytestmark = pytest.mark.model
SLOW = 2.0  # seconds the compile takes here
GAP = 1.0  # the longest a running stream may go without a token meanwhile
KEEP_TALKING = {"0": -100, "2": -100}  # tokens 0 and 2 end SmolLM2's turn


@pytest.fixture
def slow_compile(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every schema's grammar takes SLOW seconds more to write; yields the threads it was written on."""
    threads: list[str] = []
    convert = compiled.schema_gbnf

    def slow(schema: Any) -> str:
        threads.append(threading.current_thread().name)
        time.sleep(SLOW)
        return convert(schema)

    monkeypatch.setattr(compiled, "schema_gbnf", slow)
    yield threads


def _stream(url: str, stamps: list[float], started: threading.Event, done: threading.Event) -> None:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Tell me a long story about the sea."}],
        "max_tokens": 1500,
        "temperature": 0,
        "logit_bias": KEEP_TALKING,
        "stream": True,
    }
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=60) as response:
        for line in response.iter_lines():
            if line.startswith("data: {"):
                stamps.append(time.monotonic())
                started.set()
            if done.is_set():
                return  # leaving ends the generation


def test_a_slow_compile_leaves_a_running_stream_moving(server: Server, slow_compile: list[str]) -> None:
    stamps: list[float] = []
    started, done = threading.Event(), threading.Event()
    streaming = threading.Thread(target=_stream, args=(server.url, stamps, started, done))
    streaming.start()
    try:
        assert started.wait(30)
        schema = {"type": "object", "properties": {f"n{uuid.uuid4().hex}": {"type": "integer"}}}  # compiled anew
        body = {
            "model": MODEL,
            "messages": [{"role": "user", "content": "A number, as JSON."}],
            "max_tokens": 24,
            "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": schema}},
        }
        began = time.monotonic()
        answer = httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=60)
        ended = time.monotonic()
    finally:
        done.set()
        streaming.join(30)
    assert answer.status_code == 200, answer.text
    jsonschema.validate(json.loads(answer.json()["choices"][0]["message"]["content"]), schema)
    gaps = [later - earlier for earlier, later in itertools.pairwise(stamps) if began <= later <= ended]
    assert ended - began >= SLOW and len(gaps) > 10 and max(gaps) < GAP, (ended - began, len(gaps), max(gaps))
    assert slow_compile and "asgi-llm-inference" not in slow_compile
