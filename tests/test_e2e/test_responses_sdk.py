"""The official openai SDK's Responses API against the real model behind real uvicorn."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest
from openai.types.responses import Response

MODEL = "SmolLM2-135M-Instruct"
QUESTION = "What is 2+2?"  # the model answers it in about 11 tokens: well under the limit used here


def _create(client: openai.OpenAI, text: str = QUESTION, **fields: Any) -> Response:
    return client.responses.create(model="default", input=text, **{"max_output_tokens": 16, "temperature": 0, **fields})


def test_create(client: openai.OpenAI) -> None:
    # room to finish: greedy output shifts with what other tests left in the batch and cache
    response = _create(client, instructions="Answer with one number.", metadata={"run": "e2e"}, max_output_tokens=96)
    assert isinstance(response, Response)
    assert response.id.startswith("resp_") and response.object == "response"
    assert response.model == MODEL
    assert response.status == "completed" and response.incomplete_details is None
    assert response.output_text
    assert response.instructions == "Answer with one number." and response.metadata == {"run": "e2e"}
    usage = response.usage
    assert usage is not None and 0 < usage.output_tokens < 96
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens


def test_hitting_max_output_tokens_is_incomplete(client: openai.OpenAI) -> None:
    response = _create(client, "Tell me a long story.", max_output_tokens=4)
    assert response.status == "incomplete"
    assert response.incomplete_details is not None and response.incomplete_details.reason == "max_output_tokens"
    assert response.usage is not None and response.usage.output_tokens == 4
    assert response.output[-1].status == "incomplete"


def test_stream_events(client: openai.OpenAI) -> None:
    events = list(
        client.responses.create(model="default", input=QUESTION, max_output_tokens=16, temperature=0, stream=True)
    )
    types = [e.type for e in events]
    assert types[:2] == ["response.created", "response.in_progress"]
    assert types[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    final = events[-1].response  # type: ignore[union-attr]
    assert deltas and deltas == final.output_text
    assert _create(client).output_text == deltas  # temperature 0: the stream says what the plain call says


def test_stream_helper_final_response(client: openai.OpenAI) -> None:
    with client.responses.stream(model="default", input=QUESTION, max_output_tokens=16, temperature=0) as stream:
        texts = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(texts) == final.output_text
    assert final.status == "completed" and final.usage is not None and final.usage.output_tokens > 0


def test_truncated_stream_ends_incomplete(client: openai.OpenAI) -> None:
    events = list(
        client.responses.create(
            model="default", input="Tell me a long story.", max_output_tokens=4, temperature=0, stream=True
        )
    )
    last = events[-1]
    assert last.type == "response.incomplete"
    assert (
        last.response.incomplete_details is not None and last.response.incomplete_details.reason == "max_output_tokens"
    )


def test_previous_response_id_chains(client: openai.OpenAI) -> None:
    first = _create(client)
    second = _create(client, "And 3+3?", previous_response_id=first.id)
    assert second.previous_response_id == first.id
    assert first.usage is not None and second.usage is not None
    assert second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens


def test_streamed_responses_are_stored_and_chain(client: openai.OpenAI) -> None:
    with client.responses.stream(model="default", input=QUESTION, max_output_tokens=16, temperature=0) as stream:
        first = stream.get_final_response()
    assert client.responses.retrieve(first.id).output_text == first.output_text
    second = _create(client, "And again.", previous_response_id=first.id)
    assert second.status in ("completed", "incomplete")


def test_retrieve_input_items_and_delete(client: openai.OpenAI) -> None:
    first = _create(client, "One.", max_output_tokens=4)
    second = _create(client, "Two.", previous_response_id=first.id, max_output_tokens=4)
    fetched = client.responses.retrieve(second.id)
    assert fetched.id == second.id and fetched.output_text == second.output_text
    items = client.responses.input_items.list(second.id)
    assert [item.type for item in items.data] == ["message", "message", "message"]
    assert [item.role for item in items.data] == ["user", "assistant", "user"]  # type: ignore[union-attr]
    assert items.data[0].content[0].text == "Two."  # type: ignore[union-attr]  # newest first

    client.responses.delete(second.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(second.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.delete(second.id)


def test_store_false_is_not_kept(client: openai.OpenAI) -> None:
    response = _create(client, store=False)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(response.id)


def test_unknown_previous_response_is_not_found(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        _create(client, previous_response_id="resp_does_not_exist")
    assert caught.value.code == "previous_response_not_found"
    assert caught.value.param == "previous_response_id"


def test_input_tokens_count(client: openai.OpenAI) -> None:
    first = _create(client)
    counted = client.responses.input_tokens.count(model="default", input=QUESTION)
    assert counted.object == "response.input_tokens"
    assert first.usage is not None and counted.input_tokens == first.usage.input_tokens
    chained = client.responses.input_tokens.count(input="More.", previous_response_id=first.id)
    assert chained.input_tokens > counted.input_tokens


def test_unsupported_input_is_a_400_naming_the_param(client: openai.OpenAI) -> None:
    image = {"type": "input_image", "image_url": "https://example.com/cat.png", "detail": "auto"}
    with pytest.raises(openai.BadRequestError) as caught:  # remote images are off by default
        client.responses.create(
            model="default", input=[{"role": "user", "content": [{"type": "input_text", "text": "What is it?"}, image]}]
        )
    assert caught.value.param == "input[0].content[1]" and "image_url_hosts" in str(caught.value)
    file = {"type": "input_file", "file_id": "file-1"}
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="default", input=[{"role": "user", "content": [file]}])
    assert caught.value.param == "input[0].content[0].type"


def test_routes_answer_raw_http(server) -> None:
    reply = httpx.post(
        f"{server.url}/v1/responses/", json={"model": "default", "input": "Hi", "max_output_tokens": 2}, timeout=60
    )
    assert reply.status_code == 200 and reply.json()["object"] == "response"
    missing = httpx.get(f"{server.url}/v1/responses/resp_missing", timeout=60)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    wrong = httpx.post(f"{server.url}/v1/responses/resp_missing", json={}, timeout=60)
    assert wrong.status_code == 405


def test_context_overflow_names_input_or_max_output_tokens(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        _create(client, "lorem ipsum " * 2000, max_output_tokens=4)
    assert (caught.value.code, caught.value.param) == ("context_length_exceeded", "input")
    with pytest.raises(openai.BadRequestError) as caught:
        _create(client, max_output_tokens=100_000)
    assert (caught.value.code, caught.value.param) == ("context_length_exceeded", "max_output_tokens")


def test_input_items_page_through_the_sdk(client: openai.OpenAI) -> None:
    first = _create(client, "One.", max_output_tokens=4)
    second = _create(client, "Two.", previous_response_id=first.id, max_output_tokens=4)
    page = client.responses.input_items.list(second.id, limit=2, order="asc")
    assert page.data[0].content[0].text == "One."  # type: ignore[union-attr]
    assert page.has_more and page.last_id == page.data[-1].id
    rest = client.responses.input_items.list(second.id, limit=2, order="asc", after=page.last_id)
    assert [item.content[0].text for item in rest.data] == ["Two."]  # type: ignore[union-attr]
    assert not rest.has_more
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.input_items.list(second.id, after="msg_nope")
    assert caught.value.param == "after"


def test_hints_with_no_effect_here_are_refused(client: openai.OpenAI) -> None:
    refused = [
        ({"text": {"verbosity": "low"}}, "text.verbosity"),
        ({"reasoning": {"summary": "concise"}}, "reasoning.summary"),  # "auto" may give none, and is taken
        ({"include": ["file_search_call.results"]}, "include[0]"),  # sealed reasoning is honoured (sealed.py)
    ]
    for fields, param in refused:
        with pytest.raises(openai.BadRequestError) as caught:
            client.responses.create(model="default", input=QUESTION, max_output_tokens=4, **fields)
        assert caught.value.param == param
