"""The rules a chat completion stream keeps, whatever the interleaving of its choices."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from asgi_llm.adapters.base import Meta
from asgi_llm.adapters.openai import chat as openai_chat
from asgi_llm.core import Finish, GenerationEvent, TextDelta, Usage

META = Meta(request_id="test", created=1700000000, model="m")
EVENTS: list[GenerationEvent] = [
    TextDelta("A", 1),
    TextDelta("x", 0),
    TextDelta("B", 1),
    Finish("stop", Usage(7, 1), 0),
    TextDelta("C", 1),
    Finish("length", Usage(0, 3), 1),
]


def _stream(parse_sse: Callable[[bytes], list[str]], *, include_usage: bool) -> list[str]:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "n": 2, "stream": True}
    if include_usage:
        body["stream_options"] = {"include_usage": True}
    stream = openai_chat.ChatStream(openai_chat.parse(body), META)
    return parse_sse(stream.open() + b"".join(stream.event(e) for e in EVENTS) + stream.close())


def _choice_chunks(chunks: list[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    per_choice: dict[int, list[dict[str, Any]]] = {}
    for chunk in chunks:
        for choice in chunk["choices"]:
            per_choice.setdefault(choice["index"], []).append(choice)
    return per_choice


def test_stream_rules_with_usage(parse_sse: Callable[[bytes], list[str]]) -> None:
    payloads = _stream(parse_sse, include_usage=True)
    assert payloads[-1] == "[DONE]"
    chunks = [json.loads(p) for p in payloads[:-1]]

    assert {c["id"] for c in chunks} == {"chatcmpl-test"}
    assert {c["created"] for c in chunks} == {1700000000}
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)

    per_choice = _choice_chunks(chunks)
    assert sorted(per_choice) == [0, 1]
    for choices in per_choice.values():
        assert choices[0]["delta"] == {"role": "assistant", "content": ""}
        assert all("role" not in c["delta"] for c in choices[1:])
        assert [c["finish_reason"] is not None for c in choices] == [False] * (len(choices) - 1) + [True]
    assert "".join(c["delta"].get("content", "") for c in per_choice[1]) == "ABC"
    assert per_choice[1][-1]["finish_reason"] == "length"

    *body, last = chunks
    assert all(len(c["choices"]) == 1 and c["usage"] is None for c in body)
    assert last["choices"] == []
    assert last["usage"]["prompt_tokens"] == 7
    assert last["usage"]["completion_tokens"] == 4
    assert last["usage"]["total_tokens"] == 11


def test_stream_without_usage_has_no_usage_field(parse_sse: Callable[[bytes], list[str]]) -> None:
    payloads = _stream(parse_sse, include_usage=False)
    assert payloads[-1] == "[DONE]"
    chunks = [json.loads(p) for p in payloads[:-1]]
    assert all("usage" not in c and len(c["choices"]) == 1 for c in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
