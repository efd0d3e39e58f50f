"""A conversation that ends in the assistant's own words is continued, not answered anew, in each
protocol that takes one (how users make an answer start their way), through the official SDKs."""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import ollama
import openai
import pytest

from .conftest import MODEL

ASK = {"role": "user", "content": "Count from 1 to 10, separated by commas."}
START = {"role": "assistant", "content": "1, 2, 3,"}


def continues(text: str) -> bool:
    """Greedy SmolLM2 goes on from the prefill; a new turn would start again from 1."""
    return text.lstrip().startswith("4,") and not text.lstrip().startswith("1")


@pytest.fixture(scope="module")
def claude(server) -> Iterator[anthropic.Anthropic]:  # type: ignore[no-untyped-def]
    with anthropic.Anthropic(base_url=server.url, api_key="not-checked", max_retries=0) as sdk:
        yield sdk


def test_openai_chat_continues_the_assistants_message(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(model=MODEL, messages=[ASK, START], max_tokens=6, temperature=0)  # type: ignore[list-item]
    fresh = client.chat.completions.create(model=MODEL, messages=[ASK], max_tokens=6, temperature=0)  # type: ignore[list-item]
    assert continues(reply.choices[0].message.content or ""), reply.choices[0].message.content
    assert not continues(fresh.choices[0].message.content or "")  # the same question, a new turn: from 1


def test_anthropic_prefill(claude: anthropic.Anthropic) -> None:
    greedy = {"temperature": 0}  # this version of the client takes no `temperature` argument
    reply = claude.messages.create(model=MODEL, max_tokens=6, messages=[ASK, START], extra_body=greedy)  # type: ignore[list-item]
    assert reply.content[0].type == "text" and continues(reply.content[0].text), reply.content


def test_ollama_chat_continues_too(server) -> None:  # type: ignore[no-untyped-def]
    with ollama.Client(host=server.url) as llama:
        reply = llama.chat(model=MODEL, messages=[ASK, START], options={"temperature": 0, "num_predict": 6})
    assert continues(reply.message.content or ""), reply.message.content
