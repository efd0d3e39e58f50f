"""U+0085, U+2028 and U+2029 in a token never split a streamed line: each protocol's stream
writes them as JSON escapes, since JSON allows them raw but Python's `str.splitlines()` (httpx's
`iter_lines`, which the ollama SDK reads with) ends a line at each of them."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import ollama
import pytest

from asgi_llm import LLMApp, ModelConfig, ModelPool, Settings
from asgi_llm.adapters.anthropic import ANTHROPIC
from asgi_llm.adapters.ollama import OLLAMA
from asgi_llm.adapters.openai import OPENAI
from asgi_llm.engines.fake import FakeEngine

pytestmark = pytest.mark.anyio

BREAKS = "\x85\u2028\u2029"
PIECES = ("a\x85", "\u2028b", "c\u2029", " \u2028\u2029\x85 ")
TEXT = "".join(PIECES)
HI = [{"role": "user", "content": "Hi"}]


def app() -> LLMApp:
    models = (ModelConfig(id="m", path="unused.gguf"),)
    pool = ModelPool(Settings(models=models), engine_factory=lambda c, t: FakeEngine(c, t, pieces=PIECES))
    return LLMApp(pool=pool, adapters=(OPENAI, ANTHROPIC, OLLAMA))


def _sse_data(lines: list[str]) -> list[Any]:
    return [json.loads(line[len("data: ") :]) for line in lines if line.startswith("data: {")]


def _chat(events: list[Any]) -> str:
    return "".join(e["choices"][0]["delta"].get("content") or "" for e in _sse_data(events) if e["choices"])


def _completions(events: list[Any]) -> str:
    return "".join(e["choices"][0]["text"] for e in _sse_data(events) if e["choices"])


def _responses(events: list[Any]) -> str:
    return "".join(e["delta"] for e in _sse_data(events) if e["type"] == "response.output_text.delta")


def _messages(events: list[Any]) -> str:
    deltas = [e["delta"] for e in _sse_data(events) if e["type"] == "content_block_delta"]
    return "".join(d["text"] for d in deltas if d["type"] == "text_delta")


def _ollama_chat(lines: list[str]) -> str:
    return "".join(json.loads(line)["message"]["content"] for line in lines)


def _ollama_generate(lines: list[str]) -> str:
    return "".join(json.loads(line)["response"] for line in lines)


STREAMS: dict[str, tuple[dict[str, Any], Callable[[list[str]], str]]] = {
    "/chat/completions": ({"model": "m", "messages": HI, "stream": True}, _chat),
    "/completions": ({"model": "m", "prompt": "Hi", "stream": True}, _completions),
    "/responses": ({"model": "m", "input": "Hi", "stream": True}, _responses),
    "/messages": ({"model": "m", "messages": HI, "max_tokens": 50, "stream": True}, _messages),
    "/api/chat": ({"model": "m", "messages": HI}, _ollama_chat),
    "/api/generate": ({"model": "m", "prompt": "Hi"}, _ollama_generate),
}


@pytest.mark.parametrize("path", list(STREAMS))
async def test_every_streamed_line_escapes_the_characters_splitlines_breaks_at(path: str) -> None:
    body, text_of = STREAMS[path]
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app()), base_url="http://t") as http:
        reply = await http.post(path, json=body)
    assert reply.status_code == 200
    raw = reply.text
    assert not any(c in raw for c in BREAKS)
    for escape in ("\\u0085", "\\u2028", "\\u2029"):
        assert escape in raw
    lines = raw.splitlines()
    assert lines == raw.removesuffix("\n").split("\n")  # the lines a reader that splits at "\n" only sees
    assert text_of([line for line in lines if line]) == TEXT


async def test_the_ollama_sdk_reads_each_token_whole() -> None:
    transport = httpx.ASGITransport(app=app())
    client = ollama.AsyncClient(host="http://t", transport=transport)
    parts = [part async for part in await client.chat(model="m", messages=HI, stream=True)]
    assert [p.message.content for p in parts] == [*PIECES, ""]
    assert parts[-1].done and not any(p.done for p in parts[:-1])
    generated = [part.response async for part in await client.generate(model="m", prompt="Hi", stream=True)]
    assert "".join(generated) == TEXT
