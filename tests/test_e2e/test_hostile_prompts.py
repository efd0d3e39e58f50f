"""A prompt far beyond the context is refused, in each protocol's own shape, after the tokenizer
has read about a context's worth of it (not the whole text), and quickly."""

from __future__ import annotations

import resource
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

MODEL = "SmolLM2-135M-Instruct"
HUGE = "lorem ipsum dolor sit amet " * 9000  # 243 kB: refused by its length alone
LONG = "lorem ipsum dolor sit amet " * 3000  # 81 kB: past the length bound's reach, counted in chunks
READ_AT_MOST = 40_000  # characters the tokenizer may see: a few chunks, not the whole prompt
ANTHROPIC = {"anthropic-version": "2023-06-01", "x-api-key": "not-checked"}
READ_WHOLE = 120
"""Seconds a request that reads a context's worth of prompt may take: a bound against a hang, not a
timing (the server's one thread reads 2,048 tokens in about 35 s on a slow 2-core machine)."""


class Spy:
    """Wraps the loaded model's tokenizer (the real one) to count the characters it is given."""

    def __init__(self, tokenize: Any) -> None:
        self._tokenize = tokenize
        self.read = 0

    def __call__(self, text: str, **kwargs: Any) -> list[int]:
        self.read += len(text)
        return list(self._tokenize(text, **kwargs))


@pytest.fixture
def spy(server, monkeypatch: pytest.MonkeyPatch) -> Iterator[Spy]:
    model = server.pool.loaded(MODEL).runtime.model  # the engine's llama.cpp model, in this process
    watcher = Spy(model.tokenize)
    monkeypatch.setattr(model, "tokenize", watcher)
    yield watcher


def _cases(prompt: str) -> list[tuple[str, dict[str, Any], dict[str, str]]]:
    user = [{"role": "user", "content": prompt}]
    return [
        ("/v1/chat/completions", {"model": MODEL, "messages": user, "max_tokens": 4}, {}),
        ("/v1/chat/completions", {"model": MODEL, "messages": user, "max_tokens": 4, "stream": True}, {}),
        ("/v1/completions", {"model": MODEL, "prompt": prompt, "max_tokens": 4}, {}),
        ("/v1/embeddings", {"model": MODEL, "input": prompt}, {}),
        ("/v1/responses", {"model": MODEL, "input": prompt, "max_output_tokens": 16}, {}),
        ("/v1/responses/input_tokens", {"model": MODEL, "input": prompt}, {}),
        ("/v1/messages", {"model": MODEL, "messages": user, "max_tokens": 4}, ANTHROPIC),
        ("/v1/messages", {"model": MODEL, "messages": user, "max_tokens": 4, "stream": True}, ANTHROPIC),
        ("/v1/messages/count_tokens", {"model": MODEL, "messages": user}, ANTHROPIC),
        ("/api/chat", {"model": MODEL, "messages": user, "stream": False}, {}),
        ("/api/chat", {"model": MODEL, "messages": user}, {}),
        ("/api/generate", {"model": MODEL, "prompt": prompt}, {}),
        ("/api/embed", {"model": MODEL, "input": prompt, "truncate": False}, {}),
    ]


def _assert_context_error(path: str, response: httpx.Response) -> None:
    assert response.status_code == 400, response.text
    body = response.json()
    if path.startswith("/api/"):
        assert set(body) == {"error", "request_id"} and body["request_id"] == response.headers["x-request-id"]
        assert "context length" in body["error"] or "embeds at most" in body["error"]
    elif "anthropic-version" in response.request.headers:
        assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
        assert "context length" in body["error"]["message"] or "at least" in body["error"]["message"]
    else:
        assert body["error"]["code"] == "context_length_exceeded", body
        assert body["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize("prompt", [HUGE, LONG], ids=["length-bound", "chunked"])
def test_hostile_prompts_are_refused_early_in_every_protocol(server, spy: Spy, prompt: str) -> None:
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for path, body, headers in _cases(prompt):
        spy.read = 0
        started = time.monotonic()
        response = httpx.post(f"{server.url}{path}", json=body, headers=headers, timeout=30)
        _assert_context_error(path, response)
        assert time.monotonic() - started < 2, path
        assert spy.read <= READ_AT_MOST, (path, spy.read)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss < 100 * 1024  # kB: no tokens of it all


def test_the_length_bound_reads_none_of_the_prompt(server, spy: Spy) -> None:
    response = httpx.post(f"{server.url}/v1/completions", json={"model": MODEL, "prompt": HUGE}, timeout=30)
    assert response.status_code == 400
    assert "at least" in response.json()["error"]["message"]
    assert spy.read == 0


def test_ollama_truncating_embed_reads_only_what_it_keeps(server, spy: Spy) -> None:
    response = httpx.post(f"{server.url}/api/embed", json={"model": MODEL, "input": HUGE}, timeout=READ_WHOLE)
    assert response.status_code == 200, response.text
    assert len(response.json()["embeddings"]) == 1
    assert spy.read <= READ_AT_MOST * 5  # the prefix that holds the tokens kept


def test_a_prompt_that_fits_still_gets_its_answer(server, spy: Spy) -> None:
    body = {"model": MODEL, "prompt": "lorem ipsum " * 300, "max_tokens": 2}
    response = httpx.post(f"{server.url}/v1/completions", json=body, timeout=READ_WHOLE)
    assert response.status_code == 200, response.text
    assert response.json()["usage"]["prompt_tokens"] > 600
