"""Bounds, patterns, formats and lengths held by the grammar with the real model, one case per
protocol and client: at a tiny budget and a larger one, the reply validates (formats checked)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import ollama
import openai
import pytest
from jsonschema import Draft202012Validator

MODEL = "SmolLM2-135M-Instruct"
SMALL: dict[str, Any] = {
    "type": "object",
    "properties": {
        "age": {"type": "integer", "minimum": 18, "maximum": 99},
        "code": {"type": "string", "pattern": "^[A-Z]{2}[0-9]$"},
    },
    "required": ["age", "code"],
    "additionalProperties": False,
}
RICH: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 12},
        "email": {"type": "string", "format": "email"},
        "born": {"type": "string", "format": "date"},
        "score": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
        "lucky": {"type": "integer", "multipleOf": 7, "minimum": 0, "maximum": 100},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 6}, "minItems": 1, "maxItems": 2},
    },
    "required": ["name", "email", "born", "score", "lucky", "tags"],
    "additionalProperties": False,
}
CASES = [pytest.param(SMALL, 16, id="tiny-budget"), pytest.param(RICH, 200, id="rich")]
ASK = "Describe a person as JSON."


def _valid(document: Any, schema: dict[str, Any]) -> None:
    check = Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)
    assert not list(check.iter_errors(document)), document


@pytest.fixture(scope="module")
def llama(server) -> Iterator[ollama.Client]:  # type: ignore[no-untyped-def]
    sdk = ollama.Client(host=server.url, timeout=60)
    yield sdk
    sdk.close()


@pytest.mark.parametrize(("schema", "budget"), CASES)
def test_openai_json_schema(client: openai.OpenAI, schema: dict[str, Any], budget: int) -> None:
    reply = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": ASK}],
        max_tokens=budget,
        response_format={"type": "json_schema", "json_schema": {"name": "p", "schema": schema, "strict": True}},
    )
    assert reply.choices[0].finish_reason in ("stop", "length")
    _valid(json.loads(reply.choices[0].message.content or ""), schema)


@pytest.mark.parametrize(("schema", "budget"), CASES)
def test_responses_text_format_streamed(client: openai.OpenAI, schema: dict[str, Any], budget: int) -> None:
    events = list(
        client.responses.create(
            model=MODEL,
            input=ASK,
            max_output_tokens=budget,
            stream=True,
            text={"format": {"type": "json_schema", "name": "p", "schema": schema, "strict": True}},
        )
    )
    done = [e for e in events if e.type in ("response.completed", "response.incomplete")]
    assert done
    _valid(json.loads(done[-1].response.output_text), schema)


@pytest.mark.parametrize(  # a call's shortest form, {"name": "record", "arguments": {...}}, takes 19 tokens
    ("schema", "budget"), [pytest.param(SMALL, 24, id="tiny-budget"), pytest.param(RICH, 200, id="rich")]
)
def test_anthropic_tool_input_schema(server, schema: dict[str, Any], budget: int) -> None:  # type: ignore[no-untyped-def]
    with anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=60) as claude:
        reply = claude.messages.create(
            model=MODEL,
            max_tokens=budget,
            messages=[{"role": "user", "content": ASK}],
            tools=[{"name": "record", "description": "Records a person.", "input_schema": schema}],
            tool_choice={"type": "tool", "name": "record"},
        )
    calls = [block for block in reply.content if block.type == "tool_use"]
    assert len(calls) == 1 and calls[0].name == "record"
    _valid(calls[0].input, schema)


@pytest.mark.parametrize(("schema", "budget"), CASES)
def test_ollama_format(llama: ollama.Client, schema: dict[str, Any], budget: int) -> None:
    reply = llama.chat(
        model=MODEL, messages=[{"role": "user", "content": ASK}], format=schema, options={"num_predict": budget}
    )
    _valid(json.loads(reply.message.content or ""), schema)


def test_a_budget_below_the_shortest_output_is_a_400_naming_it(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": ASK}],
            max_tokens=4,
            response_format={"type": "json_schema", "json_schema": {"name": "p", "schema": SMALL}},
        )
    assert caught.value.status_code == 400 and caught.value.param == "max_tokens"
