"""Ollama's durations count from the request's start (its parse), on one monotonic clock,
whether the reply is streamed or whole; never from the second-rounded `created` stamp."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from asgi_llm.adapters.base import Meta
from asgi_llm.adapters.ollama import chat as ollama_chat
from asgi_llm.adapters.ollama import embed as ollama_embed
from asgi_llm.adapters.ollama import generate as ollama_generate
from asgi_llm.core import Embedding, EmbeddingResult, Finish, GenerationEvent, TextDelta, Usage

MS = 1_000_000
META = Meta(request_id="t", created=1_700_000_000, model="m")  # a wall-clock second, far from the clock below
EVENTS: list[GenerationEvent] = [TextDelta("Hel"), TextDelta("lo"), Finish("stop", Usage(7, 2))]
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
GENERATE = {"model": "m", "prompt": "hi"}


def ticks(*instants_ms: int) -> Callable[[], int]:
    """A clock that reads each instant (milliseconds) in turn."""
    values = iter(instants_ms)
    return lambda: next(values) * MS


@pytest.mark.parametrize(("module", "body"), [(ollama_chat, CHAT), (ollama_generate, GENERATE)])
def test_a_stream_counts_the_prompt_from_the_request_start(module: Any, body: dict[str, Any]) -> None:
    """The stream opens only once the first token is made: the wait before it is the prompt's
    evaluation, and the total runs from the parse, not from the stream's opening."""
    parsed = module.parse({**body, "stream": True}, clock=ticks(1000))
    encoder = module.ChatStream if module is ollama_chat else module.GenerateStream
    stream = encoder(parsed, META, clock=ticks(1400, 1450, 1500, 1520))  # three events, then the close
    for event in EVENTS:
        stream.event(event)
    done = stream.close().decode()
    assert '"total_duration":520000000' in done  # 1520 - 1000 ms
    assert '"prompt_eval_duration":400000000' in done  # the first token came 400 ms after the start
    assert '"eval_duration":100000000' in done  # first event to last
    assert '"load_duration":0' in done


@pytest.mark.parametrize(("module", "body"), [(ollama_chat, CHAT), (ollama_generate, GENERATE)])
def test_a_whole_reply_counts_from_the_request_start(module: Any, body: dict[str, Any]) -> None:
    parsed = module.parse({**body, "stream": False}, clock=ticks(1000))
    reply = module.render(parsed, META, EVENTS, now_ns=ticks(1750))
    assert reply["total_duration"] == 750 * MS
    assert reply["prompt_eval_duration"] + reply["eval_duration"] + reply["load_duration"] == 750 * MS


def test_embeddings_count_from_the_request_start() -> None:
    parsed = ollama_embed.parse_embed({"model": "m", "input": "hi"}, clock=ticks(1000))
    result = EmbeddingResult((Embedding((0.5, 0.5), 2),))
    reply = ollama_embed.render_embed(parsed, META, result, now_ns=ticks(1030))
    assert (reply["total_duration"], reply["load_duration"]) == (30 * MS, 0)


def test_the_default_clocks_agree() -> None:
    """Parse and render read one monotonic clock by default: a reply made at once reports a
    total under the time the two calls took, not the fraction of a second `created` rounds away."""
    before = time.perf_counter_ns()
    parsed = ollama_chat.parse({**CHAT, "stream": False})
    reply = ollama_chat.render(parsed, META, EVENTS)
    assert 0 <= reply["total_duration"] <= time.perf_counter_ns() - before
