"""Images through the app, every protocol: they reach the engine read (bytes, the format the bytes
are, one marker each where the part stood), and every refusal is a 400 in the calling protocol's
own error shape naming the part — a model that takes none, bad base64, no image, a remote image
while none is allowed — never a 500. A fake engine stands in for a vision model."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from asgi_llm import LLMApp, ModelConfig, ModelPool, Settings
from asgi_llm.adapters.anthropic import ANTHROPIC
from asgi_llm.adapters.ollama import OLLAMA
from asgi_llm.adapters.openai import OPENAI
from asgi_llm.core import IMAGE_MARKER, ChatRequest
from asgi_llm.engines.fake import FakeEngine

from .pictures import png

pytestmark = pytest.mark.anyio


IMAGE = png(4, 3)
B64 = base64.b64encode(IMAGE).decode()
DATA_URL = f"data:image/png;base64,{B64}"


class Served:
    def __init__(self) -> None:
        self.engines: dict[str, FakeEngine] = {}

    def engine(self, config: ModelConfig, thread: Any) -> FakeEngine:
        self.engines[config.id] = FakeEngine(config, thread, images=config.id == "vision")
        return self.engines[config.id]


@pytest.fixture
async def served() -> AsyncIterator[tuple[httpx.AsyncClient, Served]]:
    models = (ModelConfig(id="vision", path="unused.gguf"), ModelConfig(id="text", path="unused.gguf"))
    served = Served()
    settings = Settings(models=models, max_image_pixels=100)
    llm = LLMApp(pool=ModelPool(settings, engine_factory=served.engine), adapters=(OPENAI, ANTHROPIC, OLLAMA))
    async with llm.lifespan(), httpx.AsyncClient(transport=httpx.ASGITransport(app=llm), base_url="http://t") as client:
        yield client, served


def openai_chat(model: str, url: str = DATA_URL) -> dict[str, Any]:
    content = [{"type": "text", "text": "what is "}, {"type": "image_url", "image_url": {"url": url}}]
    return {"model": model, "messages": [{"role": "user", "content": content}]}


def responses(model: str, url: str = DATA_URL) -> dict[str, Any]:
    content = [{"type": "input_text", "text": "what is "}, {"type": "input_image", "image_url": url}]
    return {"model": model, "input": [{"role": "user", "content": content}]}


def anthropic(model: str, data: str = B64) -> dict[str, Any]:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}
    return {
        "model": model,
        "max_tokens": 8,
        "messages": [{"role": "user", "content": [image, {"type": "text", "text": "?"}]}],
    }


def ollama_chat(model: str, data: str = B64) -> dict[str, Any]:
    return {"model": model, "stream": False, "messages": [{"role": "user", "content": "what?", "images": [data]}]}


def ollama_generate(model: str, data: str = B64) -> dict[str, Any]:
    return {"model": model, "stream": False, "prompt": "what?", "images": [data]}


CASES = [
    pytest.param("/chat/completions", openai_chat, "messages[0].content[1]", id="openai-chat"),
    pytest.param("/responses", responses, "input[0].content[1]", id="responses"),
    pytest.param("/messages", anthropic, "messages[0].content[0]", id="anthropic"),
    pytest.param("/api/chat", ollama_chat, "messages[0].images[0]", id="ollama-chat"),
    pytest.param("/api/generate", ollama_generate, "images[0]", id="ollama-generate"),
]


def error_param(path: str, body: Any) -> str:
    """The part an error names, in each protocol's shape."""
    if path == "/messages":
        assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
        return str(body["error"]["message"])
    if path.startswith("/api/"):
        return str(body["error"])
    assert body["error"]["type"] == "invalid_request_error"
    return str(body["error"]["param"])


@pytest.mark.parametrize(("path", "body", "part"), CASES)
async def test_an_image_reaches_the_engine_read(
    served: tuple[httpx.AsyncClient, Served], path: str, body: Any, part: str
) -> None:
    client, engines = served
    response = await client.post(path, json=body("vision"))
    assert response.status_code == 200, response.text
    (request,) = engines.engines["vision"].requests
    assert isinstance(request, ChatRequest)
    (message,) = [m for m in request.messages if m.images]
    (image,) = message.images
    assert message.content.count(IMAGE_MARKER) == 1
    assert (image.data, image.media_type, image.part, image.encoded) == (IMAGE, "image/png", part, None)


@pytest.mark.parametrize(("path", "body", "part"), CASES)
async def test_a_model_that_takes_no_images_says_so(
    served: tuple[httpx.AsyncClient, Served], path: str, body: Any, part: str
) -> None:
    client, engines = served
    response = await client.post(path, json=body("text"))
    assert response.status_code == 400
    assert part in error_param(path, response.json())
    assert "takes no images" in response.text
    assert engines.engines["text"].requests == []


@pytest.mark.parametrize(("path", "body", "part"), CASES)
@pytest.mark.parametrize(
    ("payload", "words"),
    [
        ("@@not base64@@", "not valid base64"),
        (base64.b64encode(b"plain words, not an image").decode(), "cannot be read"),
        (B64[:20], "truncated"),
        (base64.b64encode(png(20, 20)).decode(), "max_image_pixels"),
    ],
    ids=["base64", "not-an-image", "truncated", "pixels"],
)
async def test_a_bad_image_is_a_400_in_the_protocol_s_shape(
    served: tuple[httpx.AsyncClient, Served], path: str, body: Any, part: str, payload: str, words: str
) -> None:
    client, engines = served
    wire = (
        body("vision", f"data:image/png;base64,{payload}")
        if path in ("/chat/completions", "/responses")
        else body("vision", payload)
    )
    response = await client.post(path, json=wire)
    assert response.status_code == 400, response.text
    assert part in error_param(path, response.json())
    assert words in response.text
    assert engines.engines.get("vision") is None or engines.engines["vision"].requests == []


@pytest.mark.parametrize("path", ["/chat/completions", "/responses"])
async def test_a_remote_image_is_refused_while_no_host_is_allowed(
    served: tuple[httpx.AsyncClient, Served], path: str
) -> None:
    client, _ = served
    body = openai_chat if path == "/chat/completions" else responses
    response = await client.post(path, json=body("vision", "https://images.example/cat.png"))
    assert response.status_code == 400
    assert "image_url_hosts" in response.json()["error"]["message"]


async def test_a_stored_conversation_s_image_is_read_again_for_its_next_turn(
    served: tuple[httpx.AsyncClient, Served],
) -> None:
    client, engines = served
    first = await client.post("/responses", json=responses("vision"))
    assert first.status_code == 200, first.text
    follow = {"model": "vision", "input": "and now?", "previous_response_id": first.json()["id"]}
    second = await client.post("/responses", json=follow)
    assert second.status_code == 200, second.text
    request = engines.engines["vision"].requests[-1]
    assert isinstance(request, ChatRequest)
    (message,) = [m for m in request.messages if m.images]
    assert (message.images[0].data, message.images[0].part) == (IMAGE, "previous_response_id")
    refused = await client.post("/responses", json={**follow, "model": "text"})
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "previous_response_id"
