"""Nothing lost through a gateway: the same conformance cases, through the official clients, give
the same results from `asgi-llm serve` directly and from an asgi-llm gateway whose model is that
server upstream — Anthropic's `stop_sequence` (which stop ended the text) and `message_start`'s
`input_tokens` (the prompt's size before the first token) included. Greedy, a few tokens."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import anthropic
import openai
import pytest

Gateway = Any  # this folder's conftest.Gateway

HI: list[Any] = [{"role": "user", "content": "Say hello."}]
GREEDY = {"temperature": 0}


@dataclass
class Ends:
    """Both ends of one case: the upstream asked directly, and the gateway in front of it."""

    direct: anthropic.Anthropic
    gateway: anthropic.Anthropic
    direct_openai: openai.OpenAI
    gateway_openai: openai.OpenAI
    model: str  # the upstream's name for the model; the gateway's is `remote`


@pytest.fixture(scope="module")
def ends(asgi_llm_gateway: Gateway) -> Iterator[Ends]:
    upstream = asgi_llm_gateway.upstream.base_url
    options: dict[str, Any] = {"api_key": "unused", "max_retries": 0, "timeout": 60}
    with (
        anthropic.Anthropic(base_url=upstream.removesuffix("/v1"), **options) as direct,
        anthropic.Anthropic(base_url=asgi_llm_gateway.url, **options) as gateway,
        openai.OpenAI(base_url=upstream, **options) as direct_openai,
        openai.OpenAI(base_url=f"{asgi_llm_gateway.url}/v1", **options) as gateway_openai,
    ):
        yield Ends(direct, gateway, direct_openai, gateway_openai, asgi_llm_gateway.model)


def whole(claude: anthropic.Anthropic, model: str, **asked: Any) -> dict[str, Any]:
    reply = claude.messages.create(model=model, messages=HI, extra_body=GREEDY, **asked)
    text = "".join(block.text for block in reply.content if block.type == "text")
    usage = reply.usage
    prompt = usage.input_tokens + (usage.cache_read_input_tokens or 0)
    return {"text": text, "stop": (reply.stop_reason, reply.stop_sequence), "tokens": (prompt, usage.output_tokens)}


def streamed(claude: anthropic.Anthropic, model: str, **asked: Any) -> dict[str, Any]:
    events = list(claude.messages.create(model=model, messages=HI, extra_body=GREEDY, stream=True, **asked))
    assert events[0].type == "message_start" and events[-2].type == "message_delta"
    opened = events[0].message.usage
    text = "".join(e.delta.text for e in events if e.type == "content_block_delta" and e.delta.type == "text_delta")
    final = events[-2]
    return {
        "text": text,
        "stop": (final.delta.stop_reason, final.delta.stop_sequence),
        "opened with": opened.input_tokens + (opened.cache_read_input_tokens or 0),  # before the first token
        "output": final.usage.output_tokens,
    }


def openai_chat(sdk: openai.OpenAI, model: str, **asked: Any) -> dict[str, Any]:
    reply = sdk.chat.completions.create(model=model, messages=HI, temperature=0, **asked)
    assert reply.usage is not None
    choice = reply.choices[0]
    return {"text": choice.message.content, "finish": choice.finish_reason, "prompt": reply.usage.prompt_tokens}


def stop_word(ends: Ends) -> str:
    """A stop sequence the greedy answer meets: its second word, with its space."""
    words = whole(ends.direct, ends.model, max_tokens=16)["text"].split()
    assert len(words) >= 2, words
    return " " + words[1]


Case = Callable[[Ends, bool], dict[str, Any]]


def _on(ends: Ends, through: bool) -> tuple[anthropic.Anthropic, str]:
    return (ends.gateway, "remote") if through else (ends.direct, ends.model)


def case_max_tokens(ends: Ends, through: bool) -> dict[str, Any]:
    claude, model = _on(ends, through)
    return {"whole": whole(claude, model, max_tokens=6), "stream": streamed(claude, model, max_tokens=6)}


def case_stop_sequences(ends: Ends, through: bool) -> dict[str, Any]:
    claude, model = _on(ends, through)
    stops = ["no such words here", stop_word(ends)]
    return {
        "whole": whole(claude, model, max_tokens=16, stop_sequences=stops),
        "stream": streamed(claude, model, max_tokens=16, stop_sequences=stops),
    }


def case_end_of_turn(ends: Ends, through: bool) -> dict[str, Any]:
    claude, model = _on(ends, through)
    asked: dict[str, Any] = {"max_tokens": 48, "system": "Answer with one word."}
    return {"whole": whole(claude, model, **asked), "stream": streamed(claude, model, **asked)}


def case_openai_stop(ends: Ends, through: bool) -> dict[str, Any]:
    sdk, model = (ends.gateway_openai, "remote") if through else (ends.direct_openai, ends.model)
    return openai_chat(sdk, model, max_tokens=16, stop=[stop_word(ends)])


CASES: dict[str, Case] = {
    "max_tokens": case_max_tokens,
    "stop_sequences": case_stop_sequences,
    "end_turn": case_end_of_turn,
    "openai_stop": case_openai_stop,
}


@pytest.mark.parametrize("name", list(CASES))
def test_the_same_case_gives_the_same_result_direct_and_through_the_gateway(ends: Ends, name: str) -> None:
    direct, through = CASES[name](ends, False), CASES[name](ends, True)
    assert through == direct


def test_the_cases_check_what_a_gateway_used_to_lose(ends: Ends) -> None:
    """The two results the gateway used to get wrong, as the upstream itself gives them."""
    stop = stop_word(ends)
    cut = case_stop_sequences(ends, True)
    assert cut["whole"]["stop"] == cut["stream"]["stop"] == ("stop_sequence", stop)
    assert stop not in cut["whole"]["text"] and cut["whole"]["text"] == cut["stream"]["text"]
    opened = case_max_tokens(ends, True)
    assert opened["stream"]["opened with"] == opened["whole"]["tokens"][0] > 0
