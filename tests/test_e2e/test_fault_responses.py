"""What a client sees when the engine fails on its behalf, on the shared real server: before
the first token, its protocol's 500 error body; mid-stream, its protocol's in-stream error
event and the end of the stream; the usage record (metrics) counts a 500 either way; nothing
internal leaks; and the next request is served."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import anthropic
import httpx
import openai
import pytest

from asgi_llm.engines.llamacpp import sampling

from .conftest import MODEL, Server

MESSAGE = "The model failed while serving this request."
MARK = 13  # the max_tokens that marks the request the fault is injected into


@pytest.fixture
def fails_at_token(monkeypatch: pytest.MonkeyPatch) -> Callable[[int], None]:
    """`fails_at_token(n)`: the marked requests' samplers raise at their n-th token (1: the first),
    whether they pick it themselves or take the step's one greedy pick (`take_top`)."""
    made = sampling.Sampling.__init__

    def arm(token: int) -> None:
        def init(self: Any, model: Any, logits: Any, params: Any, index: int, **options: Any) -> None:
            made(self, model, logits, params, index, **options)
            self.countdown = token if params.max_tokens == MARK else None

        def failing(original: Callable[..., int]) -> Callable[..., int]:
            def pick(self: Any, *args: Any) -> int:
                if self.countdown is not None:
                    self.countdown -= 1
                    if self.countdown == 0:
                        raise RuntimeError("/secret/path/model.gguf: the sampler broke")
                return int(original(self, *args))

            return pick

        monkeypatch.setattr(sampling.Sampling, "__init__", init)
        monkeypatch.setattr(sampling.Sampling, "sample", failing(sampling.Sampling.sample))
        monkeypatch.setattr(sampling.Sampling, "take_top", failing(sampling.Sampling.take_top))

    return arm


def _errors_500(server: Server) -> float:
    """500s in the usage records of both apps (OpenAI and Anthropic at /v1, Ollama at the root)."""
    text = httpx.get(f"{server.url}/v1/metrics", timeout=10).text + httpx.get(f"{server.url}/metrics", timeout=10).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("asgi_llm_request_errors_total{") and 'status="500"' in line
    )


def _clean(text: str) -> None:
    assert "Traceback" not in text and "/secret/path" not in text and "sampler broke" not in text


HI = [{"role": "user", "content": "Tell me a story about a fox."}]


def test_a_fault_before_the_first_token_is_a_500_in_each_protocol(
    server: Server, client: openai.OpenAI, fails_at_token: Callable[[int], None]
) -> None:
    fails_at_token(1)
    before = _errors_500(server)
    with pytest.raises(openai.InternalServerError) as chat:
        client.chat.completions.create(model=MODEL, messages=HI, max_tokens=MARK)  # type: ignore[arg-type]
    assert chat.value.status_code == 500 and chat.value.body["message"] == MESSAGE  # type: ignore[index]
    _clean(chat.value.response.text)
    with (
        anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0) as claude,
        pytest.raises(anthropic.InternalServerError) as messages,
    ):
        claude.messages.create(model=MODEL, max_tokens=MARK, messages=HI)  # type: ignore[arg-type]
    assert messages.value.status_code == 500 and messages.value.body["error"]["message"] == MESSAGE  # type: ignore[index]
    assert messages.value.body["type"] == "error"  # type: ignore[index]
    ollama = httpx.post(
        f"{server.url}/api/generate",
        json={"model": MODEL, "prompt": "Hi", "stream": False, "options": {"num_predict": MARK}},
        timeout=30,
    )
    assert ollama.status_code == 500 and ollama.json()["error"] == MESSAGE
    assert _errors_500(server) == before + 3
    fine = client.chat.completions.create(model=MODEL, messages=HI, max_tokens=4)  # type: ignore[arg-type]
    assert fine.choices[0].finish_reason == "length"


def _sse(text: str) -> list[tuple[str | None, Any]]:
    events, name = [], None
    for line in text.splitlines():
        if line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: ") and line != "data: [DONE]":
            events.append((name, json.loads(line[6:])))
            name = None
    return events


def test_a_fault_mid_stream_is_the_protocols_error_event(
    server: Server, client: openai.OpenAI, fails_at_token: Callable[[int], None]
) -> None:
    fails_at_token(4)
    before = _errors_500(server)
    chat = httpx.post(
        f"{server.url}/v1/chat/completions",
        json={"model": MODEL, "messages": HI, "max_tokens": MARK, "stream": True, "temperature": 0},
        timeout=30,
    )
    assert chat.status_code == 200
    _clean(chat.text)
    events = _sse(chat.text)
    deltas = [e for _, e in events if "choices" in e and e["choices"] and e["choices"][0]["delta"].get("content")]
    assert deltas, "tokens before the fault went out"
    assert events[-1][1] == {**events[-1][1], "error": {**events[-1][1]["error"], "message": MESSAGE}}
    assert not any(e["choices"][0].get("finish_reason") for _, e in events if e.get("choices"))  # no false finish
    with openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0) as sdk:
        with pytest.raises(openai.APIError) as streamed:
            for _ in sdk.chat.completions.create(model=MODEL, messages=HI, max_tokens=MARK, stream=True):  # type: ignore[arg-type]
                pass
        assert MESSAGE in str(streamed.value)

    messages = httpx.post(
        f"{server.url}/v1/messages",
        json={"model": MODEL, "messages": HI, "max_tokens": MARK, "stream": True},
        timeout=30,
    )
    _clean(messages.text)
    named = _sse(messages.text)
    assert named[0][0] == "message_start" and any(n == "content_block_delta" for n, _ in named)
    name, error = named[-1]
    assert (name, error["type"], error["error"]) == ("error", "error", {"type": "api_error", "message": MESSAGE})
    assert "message_stop" not in [n for n, _ in named]

    ollama = httpx.post(
        f"{server.url}/api/chat", json={"model": MODEL, "messages": HI, "options": {"num_predict": MARK}}, timeout=30
    )
    lines = [json.loads(line) for line in ollama.text.splitlines() if line]
    assert lines[0]["message"]["content"] and lines[-1]["error"] == MESSAGE and not any(line.get("done") for line in lines)
    assert _errors_500(server) == before + 4
