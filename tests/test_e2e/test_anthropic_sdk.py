"""The official anthropic SDK against the real model behind real uvicorn, mounted at /v1 in a host app.

The SDK appends `/v1/messages` to its base URL, so its base URL is the host's root.
"""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import httpx
import pytest
from anthropic.types import Message, MessageParam, ModelInfo

MODEL = "SmolLM2-135M-Instruct"
HI: list[MessageParam] = [{"role": "user", "content": "Say hello."}]
GREEDY = {"temperature": 0}  # this SDK release dropped `temperature` from its signature; the API keeps it


@pytest.fixture(scope="module")
def claude(server) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=60) as sdk:
        yield sdk


def test_message(claude: anthropic.Anthropic) -> None:
    reply = claude.messages.create(model="default", max_tokens=4, messages=HI, extra_body=GREEDY)
    assert isinstance(reply, Message)
    assert reply.id.startswith("msg_") and reply.model == MODEL and reply.role == "assistant"
    assert [block.type for block in reply.content] == ["text"]
    assert reply.content[0].text  # type: ignore[union-attr]
    assert reply.stop_reason == "max_tokens" and reply.stop_sequence is None
    assert reply.usage.output_tokens == 4 and reply.usage.input_tokens > 0


def test_system_prompt_and_history(claude: anthropic.Anthropic) -> None:
    reply = claude.messages.create(
        model=MODEL,
        max_tokens=6,
        extra_body=GREEDY,
        system=[{"type": "text", "text": "You are terse."}],
        messages=[
            {"role": "user", "content": [{"type": "text", "text": "Say hello."}]},
            {"role": "assistant", "content": "Hello."},
            {"role": "user", "content": "Again."},
        ],
    )
    assert reply.stop_reason in ("end_turn", "max_tokens") and reply.content


def test_stream_matches_the_plain_reply(claude: anthropic.Anthropic) -> None:
    plain = claude.messages.create(model=MODEL, max_tokens=12, messages=HI, extra_body=GREEDY)
    with claude.messages.stream(model=MODEL, max_tokens=12, messages=HI, extra_body=GREEDY) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == final.content[0].text == plain.content[0].text  # type: ignore[union-attr]
    assert final.stop_reason == plain.stop_reason
    assert final.usage.output_tokens == plain.usage.output_tokens
    prompt = final.usage.input_tokens + (final.usage.cache_read_input_tokens or 0)
    assert prompt == plain.usage.input_tokens + (plain.usage.cache_read_input_tokens or 0)


def test_raw_stream_event_order(claude: anthropic.Anthropic) -> None:
    events = list(claude.messages.create(model=MODEL, max_tokens=3, messages=HI, extra_body=GREEDY, stream=True))
    types = [event.type for event in events]
    assert types[0] == "message_start" and types[-2:] == ["message_delta", "message_stop"]
    assert types[1] == "content_block_start" and types[-3] == "content_block_stop"
    assert set(types[2:-3]) == {"content_block_delta"}
    opened, final = events[0].message.usage, events[-2].usage  # type: ignore[union-attr]
    assert opened.input_tokens > 0  # the prompt's size up front, as Anthropic sends it
    opened_prompt = opened.input_tokens + (opened.cache_read_input_tokens or 0)
    assert opened_prompt == final.input_tokens + (final.cache_read_input_tokens or 0)


def test_stop_sequence(claude: anthropic.Anthropic) -> None:
    full = claude.messages.create(model=MODEL, max_tokens=16, messages=HI, extra_body=GREEDY)
    text = full.content[0].text  # type: ignore[union-attr]
    words = text.split()
    assert len(words) >= 2, text
    stop = " " + words[1]
    cut = claude.messages.create(model=MODEL, max_tokens=16, messages=HI, extra_body=GREEDY, stop_sequences=[stop])
    assert cut.stop_reason == "stop_sequence" and cut.stop_sequence == stop
    assert cut.content[0].text == text[: text.index(stop)]  # type: ignore[union-attr]


def test_tool_history_is_accepted(claude: anthropic.Anthropic) -> None:
    tool = {"name": "get_time", "description": "The time now.", "input_schema": {"type": "object", "properties": {}}}
    reply = claude.messages.create(
        model=MODEL,
        max_tokens=4,
        extra_body=GREEDY,
        tools=[tool],  # type: ignore[list-item]
        messages=[
            {"role": "user", "content": "What time is it?"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_time", "input": {}}]},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "12:00"},
                    {"type": "text", "text": "Tell me."},
                ],
            },
        ],
    )
    assert reply.content and reply.stop_reason in ("end_turn", "max_tokens")


def test_count_tokens(claude: anthropic.Anthropic) -> None:
    first = claude.messages.count_tokens(model=MODEL, messages=HI)
    again = claude.messages.count_tokens(model="default", messages=HI)
    assert first.input_tokens > 0 and first.input_tokens == again.input_tokens
    longer = claude.messages.count_tokens(model=MODEL, messages=[{"role": "user", "content": "Say hello, twice."}])
    assert longer.input_tokens > first.input_tokens
    reply = claude.messages.create(model=MODEL, max_tokens=1, messages=HI)
    assert reply.usage.input_tokens + (reply.usage.cache_read_input_tokens or 0) == first.input_tokens


def test_automatic_prompt_caching_counts_the_cache_writes_and_reads(claude: anthropic.Anthropic) -> None:
    """Top-level `cache_control`: what the cache did not hold was written to it, and the next
    turn reads the prefix this one left; with input tokens, the two sum to the prompt's size."""
    system = "You answer questions about the weather in one short sentence, and nothing more. " * 6
    later: list[MessageParam] = [*HI, {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Again."}]
    first_size = claude.messages.count_tokens(model=MODEL, system=system, messages=HI).input_tokens
    later_size = claude.messages.count_tokens(model=MODEL, system=system, messages=later).input_tokens
    first = claude.messages.create(
        model=MODEL, max_tokens=2, system=system, messages=HI, extra_body=GREEDY, cache_control={"type": "ephemeral"}
    ).usage
    assert first.input_tokens == 0 and (first.cache_creation_input_tokens or 0) > 0
    assert (first.cache_creation_input_tokens or 0) + (first.cache_read_input_tokens or 0) == first_size
    with claude.messages.stream(
        model=MODEL,
        max_tokens=2,
        system=system,
        messages=later,
        extra_body=GREEDY,
        cache_control={"type": "ephemeral", "ttl": "1h"},
    ) as stream:
        opened = next(iter(stream)).message.usage  # type: ignore[union-attr]  # message_start
        second = stream.get_final_message().usage
    for usage in (opened, second):
        assert usage.input_tokens == 0 and (usage.cache_read_input_tokens or 0) >= first_size // 2  # the system prompt
        assert (usage.cache_creation_input_tokens or 0) + (usage.cache_read_input_tokens or 0) == later_size
    plain = claude.messages.create(model=MODEL, max_tokens=2, system=system, messages=later, extra_body=GREEDY).usage
    assert plain.cache_creation_input_tokens == 0  # no caching asked: nothing said to be written
    assert plain.input_tokens + (plain.cache_read_input_tokens or 0) == later_size
    with pytest.raises(anthropic.BadRequestError, match="cache_control.type"):
        claude.messages.create(model=MODEL, max_tokens=2, messages=HI, cache_control={"type": "forever"})  # type: ignore[typeddict-item]


def test_models(claude: anthropic.Anthropic, server) -> None:
    models = list(claude.models.list())
    assert all(isinstance(m, ModelInfo) and m.type == "model" for m in models)
    assert [m.id for m in models] == [MODEL, "chat-only"]
    model = claude.models.retrieve("default")
    assert model.id == MODEL and model.display_name == MODEL
    with pytest.raises(anthropic.NotFoundError):
        claude.models.retrieve("claude-9")
    openai_shape = httpx.get(f"{server.url}/v1/models", timeout=30).json()  # no anthropic-version: OpenAI's
    assert openai_shape["object"] == "list"


def test_unknown_model_is_not_found(claude: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.NotFoundError) as caught:
        claude.messages.create(model="claude-9", max_tokens=4, messages=HI)
    assert caught.value.status_code == 404
    assert caught.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]


def _error(response: httpx.Response, status: int) -> dict[str, str]:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"type", "error", "request_id"} and body["type"] == "error"
    assert body["request_id"] == response.headers["x-request-id"]
    assert set(body["error"]) == {"type", "message"}
    error: dict[str, str] = body["error"]
    return error


def test_missing_max_tokens_is_400(server) -> None:
    response = httpx.post(
        f"{server.url}/v1/messages",
        json={"model": MODEL, "messages": HI},
        headers={"anthropic-version": "2023-06-01"},
        timeout=30,
    )
    error = _error(response, 400)
    assert error["type"] == "invalid_request_error" and "max_tokens" in error["message"]


TOOL = {"name": "f", "input_schema": {"type": "object"}}


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "text", "text": "hi", "cache_control": {"type": "persistent"}}],
                    }
                ]
            },
            "messages[0].content[0].cache_control.type",
        ),
        ({"tools": [{**TOOL, "cache_control": {"type": "bogus"}}]}, "tools[0].cache_control.type"),
        ({"tool_choice": {"type": "any"}}, "tool_choice"),
        ({"service_tier": "bogus"}, "service_tier"),
        ({"tools": [TOOL, TOOL]}, "tools[1].name"),
        ({"tools": [{**TOOL, "name": "bad name!"}]}, "tools[0].name"),
    ],
    ids=[
        "block-cache-control",
        "tool-cache-control",
        "tool-choice-without-tools",
        "service-tier",
        "name-twice",
        "name",
    ],
)
def test_a_field_that_cannot_be_honoured_is_a_400_naming_it(server, fields: dict[str, object], param: str) -> None:
    payload = {"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": "Hi"}], **fields}
    headers = {"anthropic-version": "2023-06-01"}
    error = _error(httpx.post(f"{server.url}/v1/messages", json=payload, headers=headers, timeout=30), 400)
    assert error["type"] == "invalid_request_error" and param in error["message"]


PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="


@pytest.mark.parametrize(
    ("data", "words"),
    [("AA==", "cannot be read"), (PNG, "takes no images")],
    ids=["not-an-image", "text-model"],
)
def test_an_image_the_model_cannot_take_is_400(server, data: str, words: str) -> None:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}
    payload = {"model": MODEL, "max_tokens": 4, "messages": [{"role": "user", "content": [image]}]}
    error = _error(httpx.post(f"{server.url}/v1/messages", json=payload, timeout=30), 400)
    assert "messages[0].content[0]" in error["message"] and words in error["message"]


def test_unknown_route_with_anthropic_header_gets_anthropic_envelope(server) -> None:
    response = httpx.get(f"{server.url}/v1/nowhere", headers={"anthropic-version": "2023-06-01"}, timeout=30)
    assert _error(response, 404)["type"] == "not_found_error"


@pytest.mark.parametrize("stream", [False, True])
def test_prompt_longer_than_context_is_400(claude: anthropic.Anthropic, stream: bool) -> None:
    long: list[MessageParam] = [{"role": "user", "content": "lorem ipsum " * 2000}]
    with pytest.raises(anthropic.BadRequestError) as caught:
        claude.messages.create(model=MODEL, max_tokens=4, messages=long, stream=stream)
    assert caught.value.status_code == 400
    assert caught.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
