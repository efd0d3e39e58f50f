"""An engine's early prompt count opens Anthropic's stream with the prompt's size, and reaches no
other protocol's bytes, usage or first-token time (the fake engine tells it as the real one does)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from asgi_llm import LLMApp

pytestmark = pytest.mark.anyio
CLAUDE = [("anthropic-version", "2023-06-01")]


def events(body: bytes) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in body.decode().splitlines() if line.startswith("data: {")]


async def test_message_start_counts_the_prompt_and_other_streams_are_unchanged(kit: Any) -> None:
    llm = LLMApp(pool=kit.fake_pool(), adapters=kit.ALL)
    async with kit.running(llm):
        claude = await kit.drive(llm, "POST", "/messages", json={**kit.MESSAGES, "stream": True}, headers=CLAUDE)
        chat = await kit.drive(llm, "POST", "/chat/completions", json={**kit.CHAT, "stream": True})
        whole = await kit.drive(llm, "POST", "/chat/completions", json=kit.CHAT)
    start, *_, delta, stop = events(claude.body)
    assert start["type"] == "message_start" and start["message"]["usage"]["input_tokens"] == 3
    assert delta["type"] == "message_delta" and delta["usage"]["input_tokens"] == 3 and stop["type"] == "message_stop"
    chunks = events(chat.body)
    assert [c["choices"][0]["delta"] for c in chunks if c["choices"]][:2] == [
        {"role": "assistant", "content": ""},
        {"content": "Hello"},
    ]
    assert whole.json()["choices"][0]["message"]["content"] == "Hello there"
    assert whole.json()["usage"]["prompt_tokens"] == 3
