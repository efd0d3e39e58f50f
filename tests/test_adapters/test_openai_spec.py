"""Every golden output of the OpenAI adapters, checked against OpenAI's own OpenAPI spec.

Streamed completions are not checked: the spec says they share the non-stream shape, but
that shape has a non-null `finish_reason` and `usage`, while OpenAI (and we) stream
`"finish_reason": null` until the end and `"usage": null` under `include_usage`.
"""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from asgi_llm.adapters.base import Meta
from asgi_llm.adapters.openai import chat as openai_chat
from asgi_llm.adapters.openai.common import render_error
from asgi_llm.core import (
    ContextOverflow,
    InternalError,
    InvalidRequest,
    LLMError,
    ModelNotFound,
    Overloaded,
    RateLimited,
    Unauthorized,
    Unsupported,
)

SpecValidate = Callable[[Any, str], None]
ParseSSE = Callable[[bytes], list[str]]


def _json(case: Path, name: str) -> Any:
    return json.loads((case / name).read_text(encoding="utf-8"))


def _chunks(parse_sse: ParseSSE, case: Path) -> list[Any]:
    payloads = parse_sse((case / "stream.txt").read_bytes())
    assert payloads[-1] == "[DONE]"
    return [json.loads(p) for p in payloads[:-1]]


def test_chat_response(openai_chat_case: Path, spec_validate: SpecValidate) -> None:
    spec_validate(_json(openai_chat_case, "response.json"), "CreateChatCompletionResponse")


def test_chat_stream_chunks(openai_chat_case: Path, spec_validate: SpecValidate, parse_sse: ParseSSE) -> None:
    chunks = _chunks(parse_sse, openai_chat_case)
    assert chunks
    for chunk in chunks:
        spec_validate(chunk, "CreateChatCompletionStreamResponse")


def test_completions_response(openai_completions_case: Path, spec_validate: SpecValidate) -> None:
    spec_validate(_json(openai_completions_case, "response.json"), "CreateCompletionResponse")


def test_embeddings_response(openai_embeddings_case: Path, spec_validate: SpecValidate) -> None:
    body = _json(openai_embeddings_case, "response.json")
    if _json(openai_embeddings_case, "request.json").get("encoding_format") == "base64":
        # the spec describes float vectors only: check the envelope around the decoded vectors
        for item in body["data"]:
            raw = base64.b64decode(item["embedding"], validate=True)
            item["embedding"] = list(struct.unpack(f"<{len(raw) // 4}f", raw))
    spec_validate(body, "CreateEmbeddingResponse")


def test_models_response(openai_models_case: Path, spec_validate: SpecValidate) -> None:
    reply = _json(openai_models_case, "response.json")
    handler = _json(openai_models_case, "request.json")["handler"]
    name = (
        "ErrorResponse"
        if reply["status"] >= 400
        else {"list_models": "ListModelsResponse", "get_model": "Model"}[handler]
    )
    spec_validate(reply["body"], name)


ERRORS: list[LLMError] = [
    InvalidRequest("Bad temperature.", param="temperature"),
    Unsupported("No tools.", param="tools"),
    ContextOverflow("Too long.", param="messages"),
    ModelNotFound("nope"),
    Unauthorized("No key."),
    RateLimited("Slow down.", retry_after=3),
    Overloaded("Busy."),
    InternalError("Something broke."),
]


@pytest.mark.parametrize("error", ERRORS, ids=lambda e: type(e).__name__)
def test_error_envelope(error: LLMError, spec_validate: SpecValidate) -> None:
    status, body = render_error(error)
    assert status == error.status
    assert body["error"]["param"] == error.param and body["error"]["code"] == error.code
    spec_validate(body, "ErrorResponse")


def test_stream_error_event_is_an_error_envelope(spec_validate: SpecValidate, parse_sse: ParseSSE) -> None:
    parsed = openai_chat.parse({"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True})
    stream = openai_chat.ChatStream(parsed, Meta(request_id="test", created=1700000000, model="m"))
    [payload] = parse_sse(stream.error(Overloaded("Busy.")))
    spec_validate(json.loads(payload), "ErrorResponse")


@pytest.mark.parametrize(
    ("instance", "name"),
    [
        ({"object": "list"}, "ListModelsResponse"),  # data missing
        ({"id": "x", "object": "model", "created": "today", "owned_by": "me"}, "Model"),
        ({"error": {"message": "m", "type": "t", "param": None}}, "ErrorResponse"),  # code missing
        (
            {
                "id": "c",
                "object": "chat.completion.chunk",
                "created": 1,
                "model": "m",
                "system_fingerprint": None,
                "choices": [{"index": 0, "delta": {}, "finish_reason": "done"}],
            },
            "CreateChatCompletionStreamResponse",
        ),
    ],
)
def test_spec_validation_rejects_bad_shapes(instance: Any, name: str, spec_validate: SpecValidate) -> None:
    """The checker is not vacuous: `$ref`s resolve and mismatches fail."""
    with pytest.raises(jsonschema.ValidationError):
        spec_validate(instance, name)


def test_nullable_fields_accept_null(spec_validate: SpecValidate) -> None:
    """OpenAPI `nullable: true` (stream `usage`, `logprobs`, `finish_reason`) admits null."""
    chunk = {
        "id": "c",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "usage": None,
        "choices": [{"index": 0, "delta": {"content": "x"}, "logprobs": None, "finish_reason": None}],
    }
    spec_validate(chunk, "CreateChatCompletionStreamResponse")


def test_unknown_schema_name_is_an_error(spec_validate: SpecValidate) -> None:
    with pytest.raises(KeyError):
        spec_validate({}, "CreateChatCompletionResponsee")
