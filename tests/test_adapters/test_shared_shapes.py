"""Shapes more than one part writes, written once: token logprobs (OpenAI chat, Responses and
Ollama), and OpenAI's error envelope (the adapter, and the layers around a plain app)."""

from __future__ import annotations

from typing import Any

import pytest

from asgi_llm.adapters.base import Meta
from asgi_llm.adapters.ollama import chat as ollama_chat
from asgi_llm.adapters.openai import OPENAI
from asgi_llm.adapters.openai import chat as openai_chat
from asgi_llm.adapters.openai.responses import routes as responses
from asgi_llm.core import (
    Finish,
    Forbidden,
    InvalidRequest,
    LLMError,
    QuotaExhausted,
    RateLimited,
    TextDelta,
    TokenLogprob,
    TopLogprob,
    Unauthorized,
    Usage,
)
from asgi_llm.http.context import render_plain_error, tag_plain_error

META = Meta(request_id="shapes", created=1700000000, model="m")
HI = [{"role": "user", "content": "hi"}]
EVENTS = [
    TextDelta(
        "Oui",
        0,
        (TokenLogprob("Oui", -0.25, b"Oui", (TopLogprob("Oui", -0.25, b"Oui"), TopLogprob("No", -2.0, b"No"))),),
    ),
    TextDelta(" \u00e9", 0, (TokenLogprob(" \u00e9", -0.5, " \u00e9".encode(), ()),)),
    Finish("stop", Usage(3, 2)),
]
EXPECTED = [
    {
        "token": "Oui",
        "logprob": -0.25,
        "bytes": [79, 117, 105],
        "top_logprobs": [
            {"token": "Oui", "logprob": -0.25, "bytes": [79, 117, 105]},
            {"token": "No", "logprob": -2.0, "bytes": [78, 111]},
        ],
    },
    {"token": " \u00e9", "logprob": -0.5, "bytes": [32, 195, 169], "top_logprobs": []},
]


def test_every_protocol_writes_token_logprobs_alike() -> None:
    chat = openai_chat.parse({"model": "m", "messages": HI, "logprobs": True, "top_logprobs": 2})
    ollama = ollama_chat.parse({"model": "m", "messages": HI, "logprobs": True, "top_logprobs": 2, "stream": False})
    include = ["message.output_text.logprobs"]
    response = responses.parse({"model": "m", "input": "hi", "include": include, "top_logprobs": 2})
    written: dict[str, Any] = {
        "openai chat": openai_chat.render(chat, META, EVENTS)["choices"][0]["logprobs"]["content"],
        "ollama chat": ollama_chat.render(ollama, META, EVENTS)["logprobs"],
        "responses": responses.render(response, META, EVENTS)["output"][0]["content"][0]["logprobs"],
    }
    assert written == {name: EXPECTED for name in written}


@pytest.mark.parametrize(
    "error",
    [
        InvalidRequest("Bad field.", param="temperature"),
        Unauthorized("No key."),
        Forbidden("Not yours."),
        RateLimited("Slow down.", retry_after=3),
        QuotaExhausted("Spent."),
        LLMError("Broke."),
    ],
    ids=lambda error: type(error).__name__,
)
def test_a_plain_app_answers_in_the_openai_adapters_envelope(error: LLMError) -> None:
    assert render_plain_error(error) == OPENAI.render_error(error)
    status, body = render_plain_error(error)
    assert tag_plain_error(body, "r-1") == OPENAI.tag_error(body, "r-1")
    assert status == error.status and body["error"]["code"] == error.code
