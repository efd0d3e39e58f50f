"""An upstream model takes images and is sent them as OpenAI chat `image_url` parts, as the client
sent them: its own URL where it gave one, else a `data:` URL of the bytes; `detail` with it. The
upstream is a second app on a real socket (uvicorn), whose fake engine takes images, so the parts
are read back by a real OpenAI adapter on the far side."""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
import uvicorn

from asgi_llm import LLMApp, ModelConfig, ModelPool, Settings
from asgi_llm.adapters.anthropic import ANTHROPIC
from asgi_llm.adapters.ollama import OLLAMA
from asgi_llm.adapters.openai import OPENAI
from asgi_llm.core import IMAGE_MARKER, ChatRequest, ImageInput, Message
from asgi_llm.engines.fake import FakeEngine
from asgi_llm.engines.upstream.wire import chat_body

from ..test_serving.pictures import png

pytestmark = pytest.mark.anyio


IMAGE = png(5, 5)
B64 = base64.b64encode(IMAGE).decode()
DATA_URL = f"data:image/png;base64,{B64}"


def test_a_message_with_images_goes_out_as_parts_where_each_stood() -> None:
    images = (
        ImageInput(IMAGE, "image/png", "p0", url="https://images.example/a.png", detail="low"),
        ImageInput(IMAGE, "image/png", "p1"),
    )
    message = Message("user", f"{IMAGE_MARKER}compare with {IMAGE_MARKER}", images=images)
    body = chat_body(ChatRequest(model="m", messages=(Message("system", "terse"), message)), "up")
    assert body["messages"][0] == {"role": "system", "content": "terse"}
    assert body["messages"][1]["content"] == [
        {"type": "image_url", "image_url": {"url": "https://images.example/a.png", "detail": "low"}},
        {"type": "text", "text": "compare with "},
        {"type": "image_url", "image_url": {"url": DATA_URL}},
    ]


class Far:
    """The upstream: one model, `vision`, on a fake engine that takes images."""

    def __init__(self) -> None:
        self.engines: list[FakeEngine] = []
        settings = Settings(models=(ModelConfig(id="vision", path="unused.gguf"),))
        self.app = LLMApp(pool=ModelPool(settings, engine_factory=self.engine), adapters=(OPENAI,))

    def engine(self, config: ModelConfig, thread: Any) -> FakeEngine:
        self.engines.append(FakeEngine(config, thread, images=True))
        return self.engines[-1]

    def asked(self) -> list[ChatRequest]:
        return [r for e in self.engines for r in e.requests if isinstance(r, ChatRequest)]


@pytest.fixture(scope="module")
def far() -> Iterator[tuple[Far, int]]:
    upstream = Far()
    server = uvicorn.Server(uvicorn.Config(upstream.app, host="127.0.0.1", port=0, lifespan="on", log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the upstream did not start"
        time.sleep(0.05)
    port = server.servers[0].sockets[0].getsockname()[1]
    yield upstream, port
    server.should_exit = True
    thread.join(timeout=10)


@pytest.fixture
async def gateway(far: tuple[Far, int]) -> AsyncIterator[tuple[httpx.AsyncClient, Far]]:
    upstream, port = far
    model = ModelConfig(id="up", base_url=f"http://127.0.0.1:{port}", upstream_model="vision")
    llm = LLMApp(pool=ModelPool(Settings(models=(model,))), adapters=(OPENAI, ANTHROPIC, OLLAMA))
    async with llm.lifespan(), httpx.AsyncClient(transport=httpx.ASGITransport(app=llm), base_url="http://t") as client:
        yield client, upstream


CASES = [
    pytest.param(
        "/chat/completions",
        {
            "model": "up",
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "what is "},
                        {"type": "image_url", "image_url": {"url": DATA_URL, "detail": "high"}},
                    ],
                }
            ],
        },
        ("what is ", "high", "messages[0].content[1]"),
        id="openai-data-url",
    ),
    pytest.param(
        "/messages",
        {
            "model": "up",
            "max_tokens": 8,
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": B64}},
                        {"type": "text", "text": "what?"},
                    ],
                }
            ],
        },
        ("\nwhat?", None, "messages[0].content[0]"),
        id="anthropic-base64",
    ),
    pytest.param(
        "/api/chat",
        {"model": "up", "stream": False, "messages": [{"role": "user", "content": "what?", "images": [B64]}]},
        ("what?", None, "messages[0].content[0]"),
        id="ollama-base64",
    ),
]


@pytest.mark.parametrize(("path", "body", "expected"), CASES)
async def test_images_reach_the_upstream_s_model(
    gateway: tuple[httpx.AsyncClient, Far], path: str, body: Any, expected: tuple[str, str | None, str]
) -> None:
    client, upstream = gateway
    before = len(upstream.asked())
    response = await client.post(path, json=body)
    assert response.status_code == 200, response.text
    request = upstream.asked()[before]
    (message,) = [m for m in request.messages if m.images]
    (image,) = message.images
    text, detail, part = expected  # the part as the upstream's own OpenAI adapter names it
    assert message.content.count(IMAGE_MARKER) == 1 and message.content.replace(IMAGE_MARKER, "") == text
    assert (image.data, image.media_type, image.detail, image.url) == (IMAGE, "image/png", detail, DATA_URL)
    assert image.part == part
