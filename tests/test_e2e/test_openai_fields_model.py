"""OpenAI chat and completions fields against the real model through uvicorn: int64 seeds that
differ only in their high bits give different text, an assistant's earlier tool calls stay in the
prompt with no tools offered, nulls are fields not sent, and a 405 says what its path allows."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from .conftest import MODEL, Server

pytestmark = pytest.mark.model


def post(server: Server, path: str, body: dict[str, Any], status: int = 200) -> Any:
    reply = httpx.post(f"{server.url}/v1{path}", json=body, timeout=60)
    assert reply.status_code == status, reply.text
    return reply.json()


def sampled(server: Server, seed: int) -> str:
    body = {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 16, "temperature": 1.5, "seed": seed}
    return str(post(server, "/completions", body)["choices"][0]["text"])


def test_seeds_differing_only_in_high_bits_give_different_text(server: Server) -> None:
    one = sampled(server, 1)
    assert sampled(server, 1) == one  # a seed repeats
    assert sampled(server, 2**32 + 1) != one
    assert sampled(server, 2**33 + 1) != one


def test_a_seed_outside_int64_is_a_400_naming_it(server: Server) -> None:
    body = {"model": MODEL, "prompt": "Hi", "seed": 2**70}
    assert post(server, "/completions", body, 400)["error"]["param"] == "seed"


HISTORY = [
    {"role": "user", "content": "Hi"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}],
    },
    {"role": "tool", "content": "42", "tool_call_id": "call_1"},
]


@pytest.mark.parametrize(
    "offer",
    [{}, {"tools": [{"type": "function", "function": {"name": "get_weather"}}], "tool_choice": "none"}],
    ids=["no-tools", "tool-choice-none"],
)
def test_earlier_tool_calls_stay_in_the_prompt(server: Server, offer: dict[str, Any]) -> None:
    prompt = post(server, "/apply-template", {"messages": HISTORY, **offer})["prompt"]
    assert '<|im_start|>assistant\n{"name": "get_weather", "arguments": {}}<|im_end|>' in prompt


def test_a_null_max_tokens_on_completions_is_the_default_16(server: Server) -> None:
    body = {"model": MODEL, "prompt": "Count: 1, 2, 3,", "max_tokens": None, "temperature": 0, "stop": None}
    assert post(server, "/completions", body)["usage"]["completion_tokens"] == 16


@pytest.mark.parametrize("path", ["/chat/completions", "/completions", "/embeddings"])
def test_a_405_says_allow_post(server: Server, path: str) -> None:
    reply = httpx.get(f"{server.url}/v1{path}", timeout=60)
    assert (reply.status_code, reply.headers["allow"]) == (405, "POST")
