"""The end-to-end paths again on a second real model, gemma-3-270m (another architecture, tokenizer
and vocabulary, and no chat template of its own), through the official clients: chat whole and
streamed, structured output in every protocol, and embeddings. Nothing may quietly depend on
SmolLM2's ChatML template or its special tokens."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any, Literal

import anthropic
import ollama
import openai
import pydantic
import pytest

from .gemma import GEMMA, ServeHost, gemma_server

HI = [{"role": "user", "content": "Write a sentence about the sea."}]
WIDTH = 640  # gemma-3-270m's embedding length


class City(pydantic.BaseModel):
    name: str = pydantic.Field(max_length=20)
    continent: Literal["Africa", "America", "Asia", "Europe", "Oceania"]
    population: int


@pytest.fixture(scope="module")
def gemma(serve_host: ServeHost) -> Iterator[str]:
    with gemma_server(serve_host) as (url, _):
        yield url


@pytest.fixture(scope="module")
def client(gemma: str) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{gemma}/v1", api_key="unused", max_retries=0, timeout=60) as sdk:
        yield sdk


@pytest.fixture(scope="module")
def llama(gemma: str) -> Iterator[ollama.Client]:
    with ollama.Client(host=gemma, timeout=60) as sdk:
        yield sdk


def test_chat_whole_and_streamed_agree(client: openai.OpenAI) -> None:
    whole = client.chat.completions.create(model=GEMMA, messages=HI, max_tokens=16, temperature=0)  # type: ignore[arg-type]
    assert whole.model == GEMMA and whole.usage is not None
    assert whole.choices[0].finish_reason in ("stop", "length") and whole.choices[0].message.content
    assert whole.usage.completion_tokens <= 16 and whole.usage.prompt_tokens > 5
    chunks = list(
        client.chat.completions.create(
            model=GEMMA,
            messages=HI,
            max_tokens=16,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},  # type: ignore[arg-type]
        )
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == whole.choices[0].message.content
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == whole.usage.completion_tokens


def test_ollama_chat_streams_ndjson_parts(llama: ollama.Client) -> None:
    parts = list(llama.chat(model=GEMMA, messages=HI, stream=True, options={"temperature": 0, "num_predict": 12}))
    assert len(parts) > 2 and parts[-1].done and not any(p.done for p in parts[:-1])
    assert parts[-1].eval_count is not None and 0 < parts[-1].eval_count <= 12


def test_openai_parse_with_a_pydantic_model(client: openai.OpenAI) -> None:
    reply = client.chat.completions.parse(
        model=GEMMA,
        messages=[{"role": "user", "content": "Name a city, its continent and population."}],
        max_tokens=64,  # the object indented, its population as long as the grammar lets it be
        temperature=0,
        response_format=City,
    )
    assert isinstance(reply.choices[0].message.parsed, City)


def test_responses_text_format_streamed(client: openai.OpenAI) -> None:
    schema = City.model_json_schema()
    with client.responses.stream(
        model=GEMMA,
        input="Name a city.",
        max_output_tokens=80,
        temperature=0,
        text={"format": {"type": "json_schema", "name": "city", "schema": schema, "strict": True}},
    ) as stream:
        final = stream.get_final_response()
    City.model_validate_json(final.output_text)  # whole, even where the budget closed it early
    assert final.status == "completed" or (
        final.incomplete_details and final.incomplete_details.reason == "max_output_tokens"
    )


def test_anthropic_forced_tool(gemma: str) -> None:
    with anthropic.Anthropic(base_url=gemma, api_key="unused", max_retries=0, timeout=60) as claude:
        reply = claude.messages.create(
            model=GEMMA,
            max_tokens=40,
            messages=[{"role": "user", "content": "Which city?"}],
            tools=[{"name": "city", "description": "A city.", "input_schema": City.model_json_schema()}],
            tool_choice={"type": "tool", "name": "city"},
            extra_body={"temperature": 0},
        )
    assert reply.stop_reason in ("tool_use", "max_tokens")  # max_tokens: the budget closed the call early
    (call,) = [block for block in reply.content if block.type == "tool_use"]
    City.model_validate(call.input)


def test_ollama_format_schema(llama: ollama.Client) -> None:
    reply = llama.chat(
        model=GEMMA,
        messages=[{"role": "user", "content": "A city?"}],
        format=City.model_json_schema(),
        options={"temperature": 0, "num_predict": 40},
    )
    City.model_validate_json(reply.message.content or "")
    assert reply.done_reason in ("stop", "length")


def _unit(vector: list[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in vector))
    return [x / norm for x in vector]


def test_embeddings_in_both_protocols(client: openai.OpenAI, llama: ollama.Client) -> None:
    texts = ["The sea is blue.", "The ocean is blue.", "Tax forms are due in April."]
    vectors = [d.embedding for d in client.embeddings.create(model=GEMMA, input=texts).data]
    assert [len(v) for v in vectors] == [WIDTH] * 3
    unit = [_unit(v) for v in vectors]
    near, far = (sum(a * b for a, b in zip(unit[0], unit[i])) for i in (1, 2))
    assert near > far  # a real model's embeddings, not noise
    embedded = llama.embed(model=GEMMA, input=texts[0])
    assert len(embedded.embeddings[0]) == WIDTH
    assert json.dumps(embedded.embeddings[0][:4]) != json.dumps([0.0] * 4)


def test_tools_auto_runs_on_a_model_without_tool_tokens(client: openai.OpenAI) -> None:
    """No template to render tools, no marker tokens: a call (if one comes) still parses."""
    tools: list[Any] = [
        {
            "type": "function",
            "function": {
                "name": "weather",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string", "maxLength": 12}},
                    "required": ["city"],
                },
            },
        }
    ]
    reply = client.chat.completions.create(
        model=GEMMA,
        messages=[{"role": "user", "content": "Weather in Paris?"}],
        tools=tools,
        max_tokens=30,
        temperature=0,  # type: ignore[arg-type]
    )
    choice = reply.choices[0]
    for call in choice.message.tool_calls or []:
        assert call.function.name == "weather" and "city" in json.loads(call.function.arguments)  # type: ignore[union-attr]
    assert choice.finish_reason in ("stop", "length", "tool_calls")
