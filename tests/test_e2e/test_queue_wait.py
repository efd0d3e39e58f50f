"""A request waiting for the model never looks like a hang: a stream gets its headers (and, over
SSE, keep-alive comments) at once; past `queue_timeout` it gets its protocol's error, a 503 with
Retry-After where no headers went out yet. A server of its own: one sequence, a short timeout."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator

import anthropic
import httpx
import ollama
import openai
import pytest

from asgi_llm import LLMApp, ModelConfig, ModelPool, Settings
from asgi_llm.adapters.anthropic import ANTHROPIC
from asgi_llm.adapters.ollama import OLLAMA
from asgi_llm.adapters.openai import OPENAI

MODEL = "SmolLM2-135M-Instruct"
TIMEOUT = 2.0
USER = [{"role": "user", "content": "Write a very long story about the sea."}]
KEEP_TALKING = {"0": -100, "2": -100}  # tokens that end SmolLM2's turn
ANTHROPIC_HEADERS = {"anthropic-version": "2023-06-01", "x-api-key": "not-checked"}


@pytest.fixture(scope="module")
def url(serve_host) -> Iterator[str]:
    model = ModelConfig(id=MODEL, n_ctx=1024, parallel=1, max_queue=4, queue_timeout=TIMEOUT, n_threads=1)
    pool = ModelPool(Settings(models=(model,)))
    api = LLMApp(pool=pool, adapters=(OPENAI, ANTHROPIC))
    root = LLMApp(pool=pool, adapters=(OLLAMA,), health_path=None)
    with serve_host(api, root) as served:
        yield served


@contextlib.contextmanager
def busy(url: str, tokens: int = 900) -> Iterator[None]:
    """The one sequence taken by a long stream (its first token seen), until the block ends."""
    body = {"model": MODEL, "messages": USER, "max_tokens": tokens, "logit_bias": KEEP_TALKING, "stream": True}
    with httpx.Client(timeout=60) as http, http.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
        lines = response.iter_lines()
        while not next(lines).startswith("data: {"):
            pass
        yield


def _timed_lines(response: httpx.Response) -> list[tuple[float, str]]:
    started = time.monotonic()
    return [(time.monotonic() - started, line) for line in response.iter_lines() if line]


@pytest.mark.parametrize(
    ("path", "body", "headers"),
    [
        ("/v1/chat/completions", {"messages": USER, "max_tokens": 4}, {}),
        ("/v1/messages", {"messages": USER, "max_tokens": 4}, ANTHROPIC_HEADERS),
        ("/v1/responses", {"input": "hi", "max_output_tokens": 16}, {}),
    ],
    ids=["openai", "anthropic", "responses"],
)
def test_a_waiting_sse_stream_gets_headers_and_comments_then_an_error_event(url: str, path, body, headers) -> None:
    with busy(url), httpx.Client(timeout=30) as http:
        started = time.monotonic()
        payload = {"model": MODEL, **body, "stream": True}
        with http.stream("POST", url + path, json=payload, headers=headers) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            assert time.monotonic() - started < 1.5  # headers at once, not after the wait
            lines = _timed_lines(response)
            request_id = response.headers["x-request-id"]
    assert lines[0][1] == ": queued" and lines[0][0] < 1.0
    data = [json.loads(line.removeprefix("data: ")) for _, line in lines if line.startswith("data: ")]
    assert lines[-1][0] >= TIMEOUT * 0.9
    if path == "/v1/chat/completions":
        assert data[-1]["error"]["code"] == "overloaded" and "waited" in data[-1]["error"]["message"]
    elif path == "/v1/messages":
        message = data[-1]["error"]["message"]
        assert data[-1] == {"type": "error", "error": {"type": "overloaded_error", "message": message}, "request_id": request_id}
    else:
        assert data[-1]["type"] == "response.failed"  # Responses' error codes are a fixed set
        assert data[-1]["response"]["error"]["code"] == "server_error" and "waited" in data[-1]["response"]["error"]["message"]


@pytest.mark.parametrize(
    ("path", "body", "headers"),
    [
        ("/v1/chat/completions", {"messages": USER, "max_tokens": 4}, {}),
        ("/v1/messages", {"messages": USER, "max_tokens": 4}, ANTHROPIC_HEADERS),
        ("/api/chat", {"messages": USER, "stream": False}, {}),
    ],
    ids=["openai", "anthropic", "ollama"],
)
def test_a_waiting_request_past_the_timeout_is_503_with_retry_after(url: str, path, body, headers) -> None:
    with busy(url):
        response = httpx.post(url + path, json={"model": MODEL, **body}, headers=headers, timeout=30)
    assert response.status_code == 503, response.text
    assert int(response.headers["retry-after"]) >= 1
    error = response.json()
    if path == "/v1/chat/completions":
        assert error["error"]["code"] == "overloaded"
    elif path == "/v1/messages":
        assert error["type"] == "error" and error["error"]["type"] == "overloaded_error"
    else:
        assert set(error) == {"error", "request_id"} and "waited" in error["error"]
        assert error["request_id"] == response.headers["x-request-id"]


def test_a_waiting_ollama_stream_gets_headers_at_once_then_an_error_line(url: str) -> None:
    with busy(url), httpx.Client(timeout=30) as http:
        started = time.monotonic()
        with http.stream("POST", f"{url}/api/chat", json={"model": MODEL, "messages": USER}) as response:
            assert response.status_code == 200 and time.monotonic() - started < 1.5
            lines = _timed_lines(response)
    assert len(lines) == 1 and lines[0][0] >= TIMEOUT * 0.9  # nothing the SDK would fail to parse before it
    assert "waited" in json.loads(lines[0][1])["error"]


def test_sdks_raise_the_in_stream_error(url: str) -> None:
    with (
        busy(url),
        openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0) as sdk,
        pytest.raises(openai.APIError, match="waited"),
    ):
        for _ in sdk.chat.completions.create(model=MODEL, messages=USER, max_tokens=4, stream=True):  # type: ignore[arg-type]
            pass
    with busy(url), ollama.Client(host=url) as local, pytest.raises(ollama.ResponseError, match="waited"):
        for _ in local.chat(model=MODEL, messages=USER, stream=True):
            pass
    with (
        busy(url),
        anthropic.Anthropic(base_url=url, api_key="x", max_retries=0) as claude,
        pytest.raises(anthropic.APIError, match="waited"),
        claude.messages.stream(model=MODEL, messages=USER, max_tokens=4) as stream,  # type: ignore[arg-type]
    ):
        for _ in stream:
            pass


def _openai_stream(url: str) -> str:
    with openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0) as sdk:
        chunks = sdk.chat.completions.create(model=MODEL, messages=USER, max_tokens=4, stream=True)  # type: ignore[arg-type]
        return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def _anthropic_stream(url: str) -> str:
    with (
        anthropic.Anthropic(base_url=url, api_key="x", max_retries=0) as claude,
        claude.messages.stream(model=MODEL, messages=USER, max_tokens=4) as stream,  # type: ignore[arg-type]
    ):
        return stream.get_final_text()


def _ollama_stream(url: str) -> str:
    with ollama.Client(host=url) as local:
        parts = local.chat(model=MODEL, messages=USER, stream=True, options={"num_predict": 4})
        return "".join(part.message.content or "" for part in parts)


@pytest.mark.parametrize("ask", [_openai_stream, _anthropic_stream, _ollama_stream])
def test_sdks_parse_a_stream_that_waited_a_while(url: str, ask) -> None:
    """Queued behind another generation until it leaves: keep-alives, then a normal stream."""
    results: list[str] = []
    with busy(url):
        worker = threading.Thread(target=lambda: results.append(ask(url)))
        worker.start()
        time.sleep(0.5)  # it waits, and gets its keep-alives
    worker.join(60)
    assert results and results[0]
