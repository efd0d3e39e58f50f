"""The request id in error bodies, read by the official SDKs: their error parsing is unchanged
(status, message, code, param), and the id in the body is the `x-request-id` header's."""

from __future__ import annotations

from typing import Any

import anthropic
import httpx
import ollama
import openai
import pytest

MODEL = "SmolLM2-135M-Instruct"


def test_openai_errors_parse_as_before_and_carry_the_headers_id(server: Any, client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=-3)
    error = bad.value
    assert error.status_code == 400 and error.param == "max_tokens" and error.type == "invalid_request_error"
    assert isinstance(error.body, dict) and "max_tokens" in error.body["message"]
    assert error.request_id is not None and error.body["request_id"] == error.request_id

    with pytest.raises(openai.NotFoundError) as missing:
        client.embeddings.create(model="no-such-model", input="hi", extra_headers={"x-request-id": "mine-1"})
    assert missing.value.code == "model_not_found" and missing.value.request_id == "mine-1"
    assert isinstance(missing.value.body, dict) and missing.value.body["request_id"] == "mine-1"


def test_anthropic_errors_carry_a_top_level_request_id(server: Any) -> None:
    with (
        anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0) as sdk,
        pytest.raises(anthropic.NotFoundError) as missing,
    ):
        sdk.messages.create(model="no-such-model", max_tokens=4, messages=[{"role": "user", "content": "hi"}])
    error = missing.value
    assert error.status_code == 404 and isinstance(error.body, dict)
    assert error.body["type"] == "error" and error.body["error"]["type"] == "not_found_error"
    assert "no-such-model" in error.message
    assert error.body["request_id"] == error.response.headers["x-request-id"] == error.request_id  # `request-id`


def test_ollama_errors_keep_their_message_and_carry_the_id_beside_it(server: Any) -> None:
    sdk = ollama.Client(host=server.url, timeout=60)
    try:
        with pytest.raises(ollama.ResponseError) as missing:
            sdk.chat(model="no-such-model", messages=[{"role": "user", "content": "hi"}])
    finally:
        sdk.close()
    assert missing.value.status_code == 404 and missing.value.error == "The model 'no-such-model' does not exist."
    raw = httpx.post(f"{server.url}/api/chat", json={"model": "no-such-model", "messages": []}, timeout=30)
    assert raw.json() == {"error": missing.value.error, "request_id": raw.headers["x-request-id"]}
