"""A conversation that ends in the assistant's own words is continued, not answered anew, in each
protocol that takes one (how users make an answer start their way), through the official SDKs."""

from __future__ import annotations

import json
from collections.abc import Iterator

import anthropic
import jsonschema
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


PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
}
ASK_JSON = {"role": "user", "content": "A person as JSON."}
BEGUN = '{"name": "Al'


def document(prefill: str, reply: str) -> dict[str, object]:
    """The prefill and the reply, read as one document held to `PERSON`."""
    assert not reply.lstrip().startswith("{"), reply  # continued, not begun again
    value = json.loads(prefill + reply)
    jsonschema.validate(value, PERSON)
    assert isinstance(value, dict)
    return value


@pytest.mark.parametrize("budget", [5, 24])
def test_a_prefill_under_a_schema_is_continued_into_one_valid_document(client: openai.OpenAI, budget: int) -> None:
    reply = client.chat.completions.create(
        model=MODEL,
        messages=[ASK_JSON, {"role": "assistant", "content": BEGUN}],  # type: ignore[list-item]
        max_tokens=budget,
        temperature=0,
        response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}},
    )
    choice = reply.choices[0]
    value = document(BEGUN, choice.message.content or "")
    assert str(value["name"]).startswith("Al")
    assert choice.finish_reason == ("length" if budget == 5 else "stop")  # 5: closed early, the shortest ending


def test_a_prefill_the_format_cannot_begin_with_is_refused(client: openai.OpenAI) -> None:
    for prefill in ("Sure: {", '{"age": 3'):  # not JSON; the schema's first property is `name`
        with pytest.raises(openai.BadRequestError) as refused:
            client.chat.completions.create(
                model=MODEL,
                messages=[ASK_JSON, {"role": "assistant", "content": prefill}],  # type: ignore[list-item]
                max_tokens=16,
                response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}},
            )
        error = refused.value.body
        assert isinstance(error, dict) and error["param"] == "messages" and "prefill" in error["message"]


def test_a_prefill_before_a_forced_tool_call_is_refused(client: openai.OpenAI) -> None:
    tool = {"type": "function", "function": {"name": "save", "parameters": PERSON}}
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(
            model=MODEL,
            messages=[ASK_JSON, {"role": "assistant", "content": BEGUN}],  # type: ignore[list-item]
            max_tokens=16,
            tools=[tool],  # type: ignore[list-item]
            tool_choice="required",
        )
    assert isinstance(refused.value.body, dict) and refused.value.body["param"] == "messages"


def test_anthropic_and_ollama_continue_a_prefill_under_a_schema(claude: anthropic.Anthropic, server) -> None:  # type: ignore[no-untyped-def]
    reply = claude.messages.create(
        model=MODEL,
        max_tokens=24,
        messages=[ASK_JSON, {"role": "assistant", "content": BEGUN}],  # type: ignore[list-item]
        extra_body={"temperature": 0, "output_config": {"format": {"type": "json_schema", "schema": PERSON}}},
    )
    assert reply.content[0].type == "text"
    document(BEGUN, reply.content[0].text)
    with ollama.Client(host=server.url) as llama:
        answer = llama.chat(
            model=MODEL,
            messages=[ASK_JSON, {"role": "assistant", "content": BEGUN}],
            format=PERSON,
            options={"temperature": 0, "num_predict": 24},
        )
    document(BEGUN, answer.message.content or "")
