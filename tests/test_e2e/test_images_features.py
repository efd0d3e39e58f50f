"""Images with everything else (#40): structured output, a forced tool call, streaming in each
protocol and token counting, each with an image, through the official SDKs. The packaged model
with a stand-in projector of random weights (benchmarks/_standin.py), served in-process: the
pictures are noise to it, so each test asserts what holds whatever the weights — the reply parses
and validates, the stream is well-formed, and the image's tokens are counted."""

from __future__ import annotations

import base64
import json
import os
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import httpx
import httpx2
import jsonschema
import ollama
import openai
import pytest

from asgi_llm import LLMApp, ModelConfig, ModelPool, Settings
from asgi_llm.adapters.anthropic import ANTHROPIC
from asgi_llm.adapters.ollama import OLLAMA
from asgi_llm.adapters.openai import OPENAI

from .standin_projector import image_tokens, png, write_projector

pytestmark = [pytest.mark.model, pytest.mark.anyio]

PICTURE = png(32, 24, lambda x, y: (x * 8 % 256, y * 10 % 256, 128))
B64 = base64.b64encode(PICTURE).decode()
DATA_URL = f"data:image/png;base64,{B64}"
QUESTION = "What is in this picture?"
SEEN: dict[str, Any] = {
    "type": "object",
    "properties": {
        "colour": {"type": "string", "enum": ["red", "green", "blue", "grey"]},
        "objects": {"type": "integer", "minimum": 0, "maximum": 9},
    },
    "required": ["colour", "objects"],
    "additionalProperties": False,
}
CITY: dict[str, Any] = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 16}},
    "required": ["city"],
    "additionalProperties": False,
}
LIMIT = 40
OPENINGS = iter(("Zebras", "Quokkas", "Narwhals", "Okapis"))
"""First words no other prompt here begins with, one for each run of the Ollama test."""


def chat_asking(text: str = QUESTION) -> Any:
    image = {"type": "image_url", "image_url": {"url": DATA_URL}}
    return [{"role": "user", "content": [{"type": "text", "text": text}, image]}]


def responses_asking(text: str = QUESTION) -> Any:
    return [
        {
            "role": "user",
            "content": [{"type": "input_text", "text": text}, {"type": "input_image", "image_url": DATA_URL}],
        }
    ]


def valid(text: str | None, schema: dict[str, Any]) -> Any:
    assert text is not None
    document = json.loads(text)
    jsonschema.validate(document, schema)
    return document


@pytest.fixture(scope="module")
async def app(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[LLMApp]:
    projector = write_projector(tmp_path_factory.mktemp("projector") / "mmproj.gguf")
    models = (ModelConfig(id="vision", n_ctx=1024, n_threads=1, mmproj=str(projector)),)
    llm = LLMApp(pool=ModelPool(Settings(models=models)), adapters=(OPENAI, ANTHROPIC, OLLAMA))
    async with llm.lifespan():
        yield llm


@pytest.fixture
async def gpt(app: LLMApp) -> AsyncIterator[openai.AsyncOpenAI]:
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app))
    async with openai.AsyncOpenAI(base_url="http://t", api_key="-", http_client=http, max_retries=0) as client:
        yield client


@pytest.fixture
async def claude(app: LLMApp) -> AsyncIterator[anthropic.AsyncAnthropic]:
    async def at_v1(scope: Any, receive: Any, send: Any) -> None:  # the app as mounted at /v1
        await app({**scope, "root_path": "/v1", "path": scope["path"].removeprefix("/v1")}, receive, send)

    http = httpx2.AsyncClient(transport=httpx2.ASGITransport(app=at_v1))  # the SDK's own httpx
    async with anthropic.AsyncAnthropic(base_url="http://t/v1", api_key="-", http_client=http, max_retries=0) as client:
        yield client


async def test_structured_output_with_an_image(gpt: openai.AsyncOpenAI) -> None:
    chat = await gpt.chat.completions.create(
        model="vision",
        messages=chat_asking("Describe the picture as JSON."),
        max_tokens=LIMIT,
        temperature=0,
        response_format={"type": "json_schema", "json_schema": {"name": "seen", "schema": SEEN, "strict": True}},
    )
    assert chat.choices[0].finish_reason == "stop"
    valid(chat.choices[0].message.content, SEEN)
    response = await gpt.responses.create(
        model="vision",
        input=responses_asking("Describe the picture as JSON."),
        max_output_tokens=LIMIT,
        temperature=0,
        text={"format": {"type": "json_schema", "name": "seen", "schema": SEEN, "strict": True}},
    )
    assert response.status == "completed"
    valid(response.output_text, SEEN)


async def test_forced_tool_call_with_an_image(gpt: openai.AsyncOpenAI) -> None:
    tools: Any = [{"type": "function", "function": {"name": "get_weather", "parameters": CITY}}]
    forced: Any = {"type": "function", "function": {"name": "get_weather"}}
    ask = chat_asking("Where was this picture taken? Get the weather there.")
    whole = await gpt.chat.completions.create(
        model="vision", messages=ask, tools=tools, tool_choice=forced, max_tokens=LIMIT, temperature=0
    )
    (expected,) = whole.choices[0].message.tool_calls or []
    assert expected.type == "function" and expected.function.name == "get_weather"
    valid(expected.function.arguments, CITY)
    async with gpt.chat.completions.stream(
        model="vision", messages=ask, tools=tools, tool_choice=forced, max_tokens=LIMIT, temperature=0
    ) as stream:
        events = [event async for event in stream]
        final = await stream.get_final_completion()
    pieces = [e.arguments_delta for e in events if e.type == "tool_calls.function.arguments.delta"]
    (done,) = [e for e in events if e.type == "tool_calls.function.arguments.done"]
    (call,) = final.choices[0].message.tool_calls or []
    assert pieces and "".join(pieces) == done.arguments == call.function.arguments
    assert final.choices[0].finish_reason == "tool_calls" and call.function.name == "get_weather"
    assert call.function.arguments == expected.function.arguments  # greedy: the same call streamed or not
    valid(call.function.arguments, CITY)


async def test_openai_chat_stream_counts_the_image(gpt: openai.AsyncOpenAI) -> None:
    async def streamed(messages: Any) -> int:
        stream = await gpt.chat.completions.create(
            model="vision",
            messages=messages,
            max_tokens=4,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = [chunk async for chunk in stream]
        *pieces, last = chunks
        assert len({c.id for c in chunks}) == 1 and pieces[0].choices[0].delta.role == "assistant"
        assert all(len(c.choices) == 1 and c.usage is None for c in pieces)
        assert pieces[-1].choices[0].finish_reason in ("stop", "length")
        assert all(c.choices[0].finish_reason is None for c in pieces[:-1])
        assert last.choices == [] and last.usage is not None  # the usage chunk, after the finish
        assert last.usage.completion_tokens == 4 or pieces[-1].choices[0].finish_reason == "stop"
        return last.usage.prompt_tokens

    asked = await streamed(chat_asking())
    assert asked - await streamed([{"role": "user", "content": QUESTION}]) == image_tokens()


async def test_responses_stream_counts_the_image(gpt: openai.AsyncOpenAI) -> None:
    async def streamed(content: Any) -> int:
        async with gpt.responses.stream(model="vision", input=content, max_output_tokens=4, temperature=0) as stream:
            events = [event async for event in stream]
        # the SDK's get_final_response() wants `response.completed`; 4 tokens may end `incomplete`
        kinds = [e.type for e in events]
        assert kinds[0] == "response.created" and kinds[-1] in ("response.completed", "response.incomplete")
        assert [e.sequence_number for e in events] == list(range(len(events)))
        final = events[-1].response  # type: ignore[union-attr]
        deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
        assert deltas == final.output_text
        assert final.usage is not None
        return final.usage.input_tokens

    content = responses_asking()
    asked = await streamed(content)
    counted = await gpt.responses.input_tokens.count(model="vision", input=content)
    assert counted.input_tokens == asked
    assert asked - await streamed(QUESTION) == image_tokens()


async def test_anthropic_stream_counts_the_image(claude: anthropic.AsyncAnthropic) -> None:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": B64}}

    async def streamed(messages: Any) -> int:
        async with claude.messages.stream(model="vision", max_tokens=4, messages=messages) as stream:
            events = [event async for event in stream]
            final = await stream.get_final_message()
        kinds = [e.type for e in events]
        assert kinds[0] == "message_start" and kinds[-1] == "message_stop" and "message_delta" in kinds
        text = "".join(e.delta.text for e in events if e.type == "content_block_delta" and e.delta.type == "text_delta")
        assert [block.text for block in final.content if block.type == "text"] == ([text] if text else [])
        usage = final.usage  # the prompt's tokens: those read now and those the cache held
        return usage.input_tokens + (usage.cache_read_input_tokens or 0) + (usage.cache_creation_input_tokens or 0)

    asking = [{"role": "user", "content": [image, {"type": "text", "text": QUESTION}]}]
    asked = await streamed(asking)
    counted = await claude.messages.count_tokens(model="vision", messages=asking)
    assert counted.input_tokens == asked
    # the adapter joins a message's blocks with a newline (its text blocks too): one token more here
    assert asked - await streamed([{"role": "user", "content": QUESTION}]) == image_tokens() + 1


async def test_ollama_stream_counts_the_image(app: LLMApp) -> None:
    client = ollama.AsyncClient(host="http://t", transport=httpx.ASGITransport(app=app))

    async def streamed(message: dict[str, Any]) -> int:
        parts = [
            part
            async for part in await client.chat(
                model="vision", messages=[message], stream=True, options={"num_predict": 4, "temperature": 0}
            )
        ]
        assert parts and all(not p.done for p in parts[:-1]) and parts[-1].done
        assert parts[-1].done_reason in ("stop", "length") and parts[-1].eval_count
        assert all(p.message.role == "assistant" for p in parts)
        return int(parts[-1].prompt_eval_count or 0)

    # Ollama's prompt count is what the cache did not hold: after a first turn that holds the
    # template's opening, each reads all from its first word on, which no earlier prompt began with
    # (the app, and its cache, may outlive a backend's run), and the picture is one never sent before
    await client.chat(model="vision", messages=[{"role": "user", "content": "Hi"}], options={"num_predict": 1})
    text = f"{next(OPENINGS)} or stripes, which?"
    plain = await streamed({"role": "user", "content": text})
    noise = os.urandom(16 * 16 * 3)
    fresh = png(
        16, 16, lambda x, y: (noise[3 * (16 * y + x)], noise[3 * (16 * y + x) + 1], noise[3 * (16 * y + x) + 2])
    )
    asked = await streamed({"role": "user", "content": text, "images": [fresh]})
    assert asked - plain == image_tokens()
