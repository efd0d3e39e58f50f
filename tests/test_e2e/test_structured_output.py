"""Structured output with the real model and every official client: the reply always parses and validates.

Schemas bound their strings, so the model finishes well inside the token limits used here.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, Literal

import anthropic
import jsonschema
import ollama
import openai
import pydantic
import pytest

MODEL = "SmolLM2-135M-Instruct"
PLACE: dict[str, Any] = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 16},
        "country": {"type": "string", "maxLength": 16},
        "population_millions": {"type": "integer"},
    },
    "required": ["city", "country", "population_millions"],
    "additionalProperties": False,
}
QUESTION = [{"role": "user", "content": "Name a big city, its country and its population in millions, as JSON."}]
LIMIT = 64


def _valid(text: str | None, schema: dict[str, Any]) -> Any:
    assert text is not None
    document = json.loads(text)
    jsonschema.validate(document, schema)
    return document


def test_chat_json_schema(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(
        model=MODEL,
        messages=QUESTION,  # type: ignore[arg-type]
        max_tokens=LIMIT,
        temperature=0,
        response_format={"type": "json_schema", "json_schema": {"name": "place", "schema": PLACE, "strict": True}},
    )
    choice = reply.choices[0]
    assert choice.finish_reason == "stop"
    _valid(choice.message.content, PLACE)


def test_chat_json_object_streamed_with_sampling(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model=MODEL,
        messages=QUESTION,  # type: ignore[arg-type]
        max_tokens=LIMIT,
        temperature=1.0,
        seed=3,
        stream=True,
        response_format={"type": "json_object"},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    reasons = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert reasons in (["stop"], ["length"])
    if reasons == ["stop"]:
        assert isinstance(json.loads(text), dict)
    else:
        assert text.startswith("{")


class Place(pydantic.BaseModel):
    city: str = pydantic.Field(max_length=16)
    continent: Literal["Africa", "America", "Asia", "Europe", "Oceania"]


def test_chat_parse_with_a_pydantic_model(client: openai.OpenAI) -> None:
    """The SDK's own structured-outputs helper: a strict schema from a model, parsed back into it."""
    reply = client.chat.completions.parse(
        model=MODEL,
        messages=[{"role": "user", "content": "Name a city and its continent."}],
        max_tokens=LIMIT,
        temperature=0,
        response_format=Place,
    )
    assert isinstance(reply.choices[0].message.parsed, Place)


def test_chat_schema_decoding_cannot_enforce_is_400(client: openai.OpenAI) -> None:
    schema = {"type": "object", "properties": {"n": {"type": "array", "uniqueItems": True}}}
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model=MODEL,
            messages=QUESTION,  # type: ignore[arg-type]
            max_tokens=LIMIT,
            response_format={"type": "json_schema", "json_schema": {"name": "n", "schema": schema}},
        )
    assert caught.value.param == "response_format.json_schema.schema"
    assert "uniqueItems" in caught.value.message


def test_chat_invalid_schema_is_400(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model=MODEL,
            messages=QUESTION,  # type: ignore[arg-type]
            response_format={"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "objet"}}},
        )
    assert caught.value.param == "response_format.json_schema.schema"


def test_responses_text_format(client: openai.OpenAI) -> None:
    response = client.responses.create(
        model=MODEL,
        input=QUESTION[0]["content"],
        max_output_tokens=LIMIT,
        temperature=0,
        text={"format": {"type": "json_schema", "name": "place", "schema": PLACE, "strict": True}},
    )
    assert response.status == "completed"
    assert response.text is not None and response.text.format is not None
    assert response.text.format.type == "json_schema"
    _valid(response.output_text, PLACE)


@pytest.fixture(scope="module")
def llama(server) -> Iterator[ollama.Client]:
    sdk = ollama.Client(host=server.url, timeout=60)
    yield sdk
    sdk.close()


def test_ollama_chat_format_schema(llama: ollama.Client) -> None:
    reply = llama.chat(model=MODEL, messages=QUESTION, format=PLACE, options={"temperature": 0, "num_predict": LIMIT})
    assert reply.done_reason == "stop"
    _valid(reply.message.content, PLACE)


def test_ollama_generate_format_json_streamed(llama: ollama.Client) -> None:
    parts = list(
        llama.generate(
            model=MODEL, prompt=QUESTION[0]["content"], format="json", stream=True, options={"num_predict": LIMIT}
        )
    )
    text = "".join(p.response for p in parts)
    assert text.startswith("{")
    if parts[-1].done_reason == "stop":
        assert isinstance(json.loads(text), dict)


def test_anthropic_output_config_format(server) -> None:
    with anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=60) as claude:
        reply = claude.messages.create(
            model=MODEL,
            max_tokens=LIMIT,
            messages=QUESTION,  # type: ignore[arg-type]
            output_config={"format": {"type": "json_schema", "schema": PLACE}},
            extra_body={"temperature": 0},
        )
    assert reply.stop_reason == "end_turn"
    assert [block.type for block in reply.content] == ["text"]
    _valid(reply.content[0].text, PLACE)  # type: ignore[union-attr]
