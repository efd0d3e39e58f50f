"""Fallback models over real HTTP: a gateway whose upstream models fall back to the packaged model
run here. An upstream that is down or answers 500 before its first byte: the packaged model
answers, and the response's `model`, its `x-asgi-llm-fallback` header and the usage record say
so; once the upstream answers again it serves again. An upstream that dies mid-stream: the
stream ends with the protocol's error event, and nothing is retried.

The upstream is a small scripted server: real servers do not fail on request."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from asgi_llm import ModelConfig, Settings

pytestmark = pytest.mark.model
LOCAL = "SmolLM2-135M-Instruct"
HI: list[Any] = [{"role": "user", "content": "Say hello."}]


@dataclass
class Script:
    healthy: bool = False  # whether `flaky` answers (else 500)
    calls: dict[str, int] | None = None

    def count(self, model: str) -> None:
        assert self.calls is not None
        self.calls[model] = self.calls.get(model, 0) + 1


def scripted_upstream(script: Script) -> Starlette:
    async def chat(request: Request) -> Response:
        model = (await request.json())["model"]
        script.count(model)
        if model == "dying":
            return StreamingResponse(_dies(), media_type="text/event-stream")
        if model == "flaky" and script.healthy:
            return StreamingResponse(_answers(), media_type="text/event-stream")
        return JSONResponse({"error": {"message": "internal failure", "type": "server_error"}}, 500)

    async def models(request: Request) -> JSONResponse:
        return JSONResponse({"object": "list", "data": [{"id": "flaky"}, {"id": "dying"}]})

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"]), Route("/v1/models", models)])


def _sse(chunk: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(chunk)}\n\n".encode()


async def _answers() -> AsyncIterator[bytes]:
    yield _sse({"choices": [{"index": 0, "delta": {"content": "upstream again"}, "finish_reason": None}]})
    yield _sse({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    yield _sse({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2}})
    yield b"data: [DONE]\n\n"


async def _dies() -> AsyncIterator[bytes]:
    yield _sse({"choices": [{"index": 0, "delta": {"content": "Hel"}, "finish_reason": None}]})
    raise ConnectionAbortedError("the upstream process died")  # uvicorn drops the connection mid-body


@dataclass
class Served:
    url: str
    script: Script
    usage: Path

    def records(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.usage.read_text().splitlines()] if self.usage.exists() else []

    def new_records(self, before: int) -> list[dict[str, Any]]:
        """The records after the first `before`, once one has come (the sink appends off the event loop)."""
        deadline = time.monotonic() + 10
        while len(self.records()) == before:
            assert time.monotonic() < deadline, "no usage record"
            time.sleep(0.05)
        return self.records()[before:]


@pytest.fixture(scope="module")
def served(
    serve_app: Any, serve_gateway: Any, unused_port: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    script = Script(calls={})
    usage = tmp_path_factory.mktemp("fallbacks") / "usage.jsonl"
    with serve_app(scripted_upstream(script)) as base:
        upstream = {"fallbacks": ("local",), "health_interval": 0.2, "connect_timeout": 2.0}
        models = (
            ModelConfig(id="down", base_url=f"http://127.0.0.1:{unused_port()}/v1", **upstream),
            ModelConfig(id="flaky", base_url=f"{base}/v1", **upstream),
            ModelConfig(id="dying", base_url=f"{base}/v1", **upstream),
            ModelConfig(id="local", aliases=(LOCAL,), n_ctx=512, n_threads=1, parallel=1),
        )
        with serve_gateway(Settings(models=models, usage_jsonl=str(usage))) as url:
            deadline = time.monotonic() + 60
            while httpx.get(f"{url}/health", timeout=10).status_code != 200:  # the local model has loaded
                assert time.monotonic() < deadline, "the gateway did not become ready"
                time.sleep(0.1)
            yield Served(url, script, usage)


@pytest.fixture(scope="module")
def oai(served: Served) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{served.url}/v1", api_key="unused", max_retries=0, timeout=60) as sdk:
        yield sdk


@pytest.mark.parametrize("model", ["down", "flaky"])
def test_an_upstream_down_or_failing_is_served_by_the_local_model(
    oai: openai.OpenAI, served: Served, model: str
) -> None:
    before = len(served.records())
    raw = oai.chat.completions.with_raw_response.create(model=model, messages=HI, max_tokens=4, temperature=0)
    reply = raw.parse()
    assert raw.headers["x-asgi-llm-fallback"] == model
    assert reply.model == "local" and reply.choices[0].message.content
    assert reply.usage is not None and reply.usage.completion_tokens == 4
    (record,) = served.new_records(before)
    assert (record["model"], record["status"], record["completion_tokens"]) == ("local", 200, 4)


def test_a_stream_says_so_too_and_in_anthropics_words(served: Served) -> None:
    with anthropic.Anthropic(base_url=served.url, api_key="unused", max_retries=0, timeout=60) as claude:
        raw = claude.messages.with_raw_response.create(model="down", max_tokens=4, messages=HI, stream=True)
        assert raw.headers["x-asgi-llm-fallback"] == "down"
        events = list(raw.parse())
    assert events[0].type == "message_start" and events[0].message.model == "local"
    assert events[0].message.usage.input_tokens > 0 and events[-1].type == "message_stop"


def test_the_upstream_serves_again_once_it_answers(oai: openai.OpenAI, served: Served) -> None:
    served.script.healthy = True
    try:
        deadline = time.monotonic() + 20
        while True:  # its replica is out of rotation until a health check passes (0.2 s, then backing off)
            raw = oai.chat.completions.with_raw_response.create(model="flaky", messages=HI, max_tokens=4)
            if raw.parse().model == "flaky":
                break
            assert time.monotonic() < deadline, "the upstream was not used again"
            time.sleep(0.2)
        assert "x-asgi-llm-fallback" not in raw.headers
        assert raw.parse().choices[0].message.content == "upstream again"
    finally:
        served.script.healthy = False


def test_an_upstream_that_dies_mid_stream_ends_with_the_error_event_and_no_retry(
    oai: openai.OpenAI, served: Served
) -> None:
    assert served.script.calls is not None
    before, calls = len(served.records()), served.script.calls.get("dying", 0)
    stream = oai.chat.completions.create(model="dying", messages=HI, max_tokens=8, stream=True)
    text = ""
    with pytest.raises(openai.APIError, match="The upstream server closed the connection"):
        for chunk in stream:
            assert chunk.model == "dying"
            text += chunk.choices[0].delta.content or "" if chunk.choices else ""
    assert text == "Hel"  # what the upstream sent, and nothing from another model
    assert served.script.calls["dying"] == calls + 1
    (record,) = served.new_records(before)
    assert (record["model"], record["status"]) == ("dying", 502)
