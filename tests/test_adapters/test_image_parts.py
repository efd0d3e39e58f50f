"""Images in every protocol's request: each form becomes an `ImageInput` naming its part, with the
marker where the part stood; nothing is decoded or fetched here. A text holding the marker, and
every malformed image part, is a 400 naming its part."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from asgi_llm.adapters.anthropic import messages as anthropic
from asgi_llm.adapters.ollama import chat as ollama_chat
from asgi_llm.adapters.ollama import generate as ollama_generate
from asgi_llm.adapters.openai import chat as openai_chat
from asgi_llm.adapters.openai.responses import routes as responses
from asgi_llm.core import IMAGE_MARKER, ChatRequest, InvalidRequest, Message

DATA_URL = "data:image/png;base64,iVBORw0KGgo="
WEB_URL = "https://images.example/cat.png"


def _messages(parse: Callable[[Any], Any], body: dict[str, Any]) -> tuple[Message, ...]:
    request = parse(body).request
    assert isinstance(request, ChatRequest)
    return request.messages


def chat(content: Any, role: str = "user") -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": "hi"}, {"role": role, "content": content}]}


def responses_input(content: Any) -> dict[str, Any]:
    return {"model": "m", "input": [{"role": "user", "content": content}]}


def anthropic_body(content: Any, **fields: Any) -> dict[str, Any]:
    return {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": content}], **fields}


def test_openai_chat_image_url_parts_stand_where_they_were() -> None:
    content = [
        {"type": "text", "text": "a "},
        {"type": "image_url", "image_url": {"url": DATA_URL}},
        {"type": "text", "text": " b "},
        {"type": "image_url", "image_url": {"url": WEB_URL, "detail": "low"}},
    ]
    message = _messages(openai_chat.parse, chat(content))[1]
    assert message.content == f"a {IMAGE_MARKER} b {IMAGE_MARKER}"
    first, second = message.images
    assert (first.part, first.url, first.media_type, first.data, first.detail) == (
        "messages[1].content[1]",
        DATA_URL,
        "image/png",
        b"",
        None,
    )
    assert (second.part, second.url, second.detail) == ("messages[1].content[3]", WEB_URL, "low")


def test_responses_input_image_by_url() -> None:
    content = [{"type": "input_image", "image_url": WEB_URL}, {"type": "input_text", "text": "what?"}]
    (message,) = _messages(responses.parse, responses_input(content))
    assert message.content == f"{IMAGE_MARKER}what?"
    assert [(i.part, i.url, i.detail) for i in message.images] == [("input[0].content[0]", WEB_URL, "auto")]


def test_anthropic_image_blocks_base64_and_url() -> None:
    content = [
        {"type": "text", "text": "see"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "/9j/"}},
        {"type": "image", "source": {"type": "url", "url": WEB_URL}},
    ]
    (message,) = _messages(anthropic.parse, anthropic_body(content))
    assert message.content == f"see\n{IMAGE_MARKER}\n{IMAGE_MARKER}"
    base64, by_url = message.images
    assert (base64.part, base64.encoded, base64.media_type, base64.url) == (
        "messages[0].content[1]",
        "/9j/",
        "image/jpeg",
        None,
    )
    assert (by_url.part, by_url.url, by_url.encoded) == ("messages[0].content[2]", WEB_URL, None)


def test_ollama_images_stand_before_the_text() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "what?", "images": ["AAAA", "BBBB"]}]}
    (message,) = _messages(ollama_chat.parse, body)
    assert message.content == f"{IMAGE_MARKER}{IMAGE_MARKER}what?"
    assert [(i.part, i.encoded) for i in message.images] == [
        ("messages[0].images[0]", "AAAA"),
        ("messages[0].images[1]", "BBBB"),
    ]
    (turn,) = _messages(ollama_generate.parse, {"model": "m", "prompt": "what?", "images": ["AAAA"]})
    assert turn.content == f"{IMAGE_MARKER}what?"
    assert [(i.part, i.encoded) for i in turn.images] == [("images[0]", "AAAA")]


def test_a_prompt_of_images_alone_is_no_load_call() -> None:
    parsed = ollama_generate.parse({"model": "m", "images": ["AAAA"]})
    assert not parsed.load_only
    assert parsed.request.messages[0].content == IMAGE_MARKER


def test_a_stored_conversation_keeps_its_images_by_url() -> None:
    content = [{"type": "input_image", "image_url": DATA_URL, "detail": "high"}]
    parsed = responses.parse(responses_input(content))
    assert parsed.options.input_items[0]["content"] == [
        {"type": "input_image", "image_url": DATA_URL, "detail": "high"}
    ]


MARKER = f"look: {IMAGE_MARKER}"

FORGED = [
    pytest.param(openai_chat.parse, chat(MARKER), "messages[1].content", id="chat-string"),
    pytest.param(
        openai_chat.parse, chat([{"type": "text", "text": MARKER}]), "messages[1].content[0].text", id="chat-part"
    ),
    pytest.param(openai_chat.parse, chat(MARKER, role="assistant"), "messages[1].content", id="chat-assistant"),
    pytest.param(responses.parse, {"model": "m", "input": MARKER}, "input", id="responses-string"),
    pytest.param(
        responses.parse, {"model": "m", "input": "hi", "instructions": MARKER}, "instructions", id="instructions"
    ),
    pytest.param(
        responses.parse,
        responses_input([{"type": "input_text", "text": MARKER}]),
        "input[0].content[0].text",
        id="responses-part",
    ),
    pytest.param(anthropic.parse, anthropic_body(MARKER), "messages[0].content", id="anthropic-string"),
    pytest.param(
        anthropic.parse,
        anthropic_body([{"type": "text", "text": MARKER}]),
        "messages[0].content[0].text",
        id="anthropic-block",
    ),
    pytest.param(anthropic.parse, anthropic_body("hi", system=MARKER), "system", id="anthropic-system"),
    pytest.param(
        ollama_chat.parse,
        {"model": "m", "messages": [{"role": "user", "content": MARKER}]},
        "messages[0].content",
        id="ollama-chat",
    ),
    pytest.param(ollama_generate.parse, {"model": "m", "prompt": MARKER}, "prompt", id="ollama-prompt"),
    pytest.param(ollama_generate.parse, {"model": "m", "prompt": "hi", "system": MARKER}, "system", id="ollama-system"),
]


@pytest.mark.parametrize(("parse", "body", "param"), FORGED)
def test_a_text_holding_the_marker_cannot_forge_an_image(parse: Callable[[Any], Any], body: Any, param: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        parse(body)
    assert (refused.value.status, refused.value.param) == (400, param)
    assert IMAGE_MARKER in refused.value.message


def _image(url: Any, detail: str | None = None) -> list[dict[str, Any]]:
    image: dict[str, Any] = {"url": url} if detail is None else {"url": url, "detail": detail}
    return [{"type": "image_url", "image_url": image}]


MALFORMED = [
    pytest.param(openai_chat.parse, chat(_image("ftp://x/y.png")), "messages[1].content[0]", id="chat-scheme"),
    pytest.param(openai_chat.parse, chat(_image("/etc/passwd")), "messages[1].content[0]", id="chat-path"),
    pytest.param(
        openai_chat.parse, chat(_image("data:image/png;base64")), "messages[1].content[0]", id="chat-data-no-comma"
    ),
    pytest.param(openai_chat.parse, chat(_image(DATA_URL, "ultra")), "messages[1].content[0].detail", id="chat-detail"),
    pytest.param(
        openai_chat.parse,
        chat([{"type": "image_url"}]),
        "messages[1].content[0].image_url",
        id="chat-image-url-missing",
    ),
    pytest.param(
        responses.parse,
        responses_input([{"type": "input_image", "file_id": "file-1"}]),
        "input[0].content[0].file_id",
        id="responses-file-id",
    ),
    pytest.param(
        responses.parse,
        responses_input([{"type": "input_image", "detail": "auto"}]),
        "input[0].content[0].image_url",
        id="responses-no-url",
    ),
    pytest.param(
        responses.parse,
        responses_input([{"type": "input_image", "image_url": "file:///etc/passwd"}]),
        "input[0].content[0]",
        id="responses-file-url",
    ),
    pytest.param(
        anthropic.parse,
        anthropic_body([{"type": "image", "source": {"type": "base64", "media_type": "image/png"}}]),
        "messages[0].content[0].source.data",
        id="anthropic-no-data",
    ),
    pytest.param(
        anthropic.parse, anthropic_body([{"type": "image"}]), "messages[0].content[0].source", id="anthropic-no-source"
    ),
    pytest.param(
        anthropic.parse,
        {
            "model": "m",
            "max_tokens": 8,
            "messages": [
                {"role": "assistant", "content": [{"type": "image", "source": {"type": "url", "url": WEB_URL}}]}
            ],
        },
        "messages[0].content[0].type",
        id="anthropic-assistant-image",
    ),
]


@pytest.mark.parametrize(("parse", "body", "param"), MALFORMED)
def test_a_malformed_image_part_is_refused_by_name(parse: Callable[[Any], Any], body: Any, param: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        parse(body)
    assert (refused.value.status, refused.value.param) == (400, param)
