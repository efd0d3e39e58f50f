"""Disconnects stop decoding at once, and metadata routes answer while a long generation runs."""

from __future__ import annotations

import json
import time

import httpx
import pytest

MODEL = "SmolLM2-135M-Instruct"
LONG = {
    "model": MODEL,
    "messages": [{"role": "user", "content": "Write a very long story about the sea."}],
    "max_tokens": 500,
    "temperature": 0,
    "logit_bias": {"0": -100, "2": -100},  # tokens 0 and 2 end SmolLM2's turn: keep it talking for all 500 tokens
}


def _engine(server):
    engine = server.pool.loaded(MODEL)
    assert engine is not None
    return engine


def _wait_idle(server, seconds: float = 5.0) -> float:
    started = time.monotonic()
    while server.pool.thread.busy:
        assert time.monotonic() - started < seconds, "generation kept running after the client left"
        time.sleep(0.005)
    return time.monotonic() - started


def test_stream_disconnect_stops_decoding_within_a_couple_of_tokens(server) -> None:
    engine = _engine(server)
    with (
        httpx.Client(timeout=30) as http,
        http.stream("POST", f"{server.url}/v1/chat/completions", json={**LONG, "stream": True}) as response,
    ):
        assert response.status_code == 200
        seen = 0
        for line in response.iter_lines():
            if line.startswith("data: {"):
                seen += 1
            if seen == 10:
                break
        at_disconnect = engine.decoded_tokens
    _wait_idle(server)
    assert engine.decoded_tokens - at_disconnect <= 3


def test_non_streaming_disconnect_stops_decoding(server) -> None:
    engine = _engine(server)
    before = engine.decoded_tokens
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{server.url}/v1/chat/completions", json=LONG, timeout=httpx.Timeout(30, read=0.5))
    at_disconnect = engine.decoded_tokens
    _wait_idle(server)
    assert at_disconnect - before < 500
    assert engine.decoded_tokens - at_disconnect <= 3


def test_models_and_health_answer_while_a_long_generation_runs(server) -> None:
    with (
        httpx.Client(timeout=30) as http,
        http.stream("POST", f"{server.url}/v1/chat/completions", json={**LONG, "stream": True}) as response,
    ):
        lines = response.iter_lines()
        assert next(lines).startswith("data: ")
        started = time.monotonic()
        models = http.get(f"{server.url}/v1/models")
        health = http.get(f"{server.url}/v1/health")
        elapsed = time.monotonic() - started
        assert models.status_code == 200 and models.json()["data"][0]["id"] == MODEL
        assert health.status_code == 200 and health.json()["status"] == "ok"
        assert server.pool.thread.busy, "the generation should still be running"
        assert elapsed < 1.0
        tokens = sum(1 for line in lines if line.startswith("data: {") and '"content"' in line)
    assert tokens >= 490  # the generation was not disturbed


def test_second_request_waits_its_turn_and_completes(server) -> None:
    payload = {**LONG, "max_tokens": 20, "stream": True}
    with (
        httpx.Client(timeout=60) as http,
        http.stream("POST", f"{server.url}/v1/chat/completions", json=payload) as first,
    ):
        second = http.post(f"{server.url}/v1/chat/completions", json={**LONG, "max_tokens": 5})
        body = [json.loads(line[6:]) for line in first.iter_lines() if line.startswith("data: {")]
    assert second.status_code == 200
    assert second.json()["usage"]["completion_tokens"] == 5
    assert body[-1]["choices"][0]["finish_reason"] == "length"
