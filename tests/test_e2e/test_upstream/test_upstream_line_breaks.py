"""An upstream that writes U+0085, U+2028 or U+2029 raw inside its streamed JSON (JSON allows it;
llama-server and vLLM do it) is read whole: its SSE lines end where SSE ends them, not wherever
`str.splitlines()` would. And the gateway's own streams escape them, as every stream here does.

The upstream is a small scripted server, since a model rarely writes these on cue."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import ollama
import openai
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from asgi_llm import ModelConfig, Settings

PIECES = ("a\x85", "\u2028b", "c\u2029", " \r\u2028 ")
HI = [{"role": "user", "content": "hi"}]


async def chat(request: Request) -> Response:
    return StreamingResponse(_stream(), media_type="text/event-stream")


async def _stream() -> AsyncIterator[bytes]:
    for piece in PIECES:
        chunk = {"choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]}
        yield f"data: {json.dumps(chunk, ensure_ascii=False)}\r\n\r\n".encode()  # raw, as llama-server writes them
    end = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    usage = {"prompt_tokens": 3, "completion_tokens": len(PIECES), "total_tokens": 3 + len(PIECES)}
    yield f"data: {json.dumps(end)}\n\ndata: {json.dumps({'choices': [], 'usage': usage})}\n\ndata: [DONE]\n\n".encode()


@pytest.fixture(scope="module")
def gateway(serve_app: Any, serve_gateway: Any) -> Iterator[str]:
    upstream = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])
    with (
        serve_app(upstream) as base,
        serve_gateway(Settings(models=(ModelConfig(id="raw", base_url=f"{base}/v1"),))) as url,
    ):
        yield url


def test_the_upstreams_raw_line_breaks_reach_the_client_as_sent(gateway: str) -> None:
    with openai.OpenAI(base_url=f"{gateway}/v1", api_key="unused", max_retries=0) as sdk:
        whole = sdk.chat.completions.create(model="raw", messages=HI)  # type: ignore[arg-type]
        assert whole.choices[0].message.content == "".join(PIECES)
        streamed = sdk.chat.completions.create(model="raw", messages=HI, stream=True)  # type: ignore[arg-type]
        assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == "".join(PIECES)
    with ollama.Client(host=gateway, timeout=30) as local:
        parts = list(local.chat(model="raw", messages=HI, stream=True))
    assert "".join(p.message.content or "" for p in parts) == "".join(PIECES) and parts[-1].done
    raw = httpx.post(f"{gateway}/api/chat", json={"model": "raw", "messages": HI}, timeout=30).text
    assert not any(c in raw for c in "\x85\u2028\u2029") and "\\u2028" in raw
