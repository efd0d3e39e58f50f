"""An image reaches a vision model through every protocol's official SDK (#40): the packaged model
with a stand-in projector of random weights (benchmarks/_standin.py), served in-process. The
pictures are noise to it, so each test asserts what holds whatever the weights: the reply comes,
and the image's tokens are counted in the prompt's."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import httpx2
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


@pytest.fixture(scope="module")
def projector(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_projector(tmp_path_factory.mktemp("projector") / "mmproj.gguf")


@pytest.fixture(scope="module")
async def app(projector: Path) -> AsyncIterator[LLMApp]:
    models = (
        ModelConfig(id="vision", n_ctx=1024, n_threads=1, mmproj=str(projector)),
        ModelConfig(id="text", n_ctx=1024, n_threads=1),
    )
    llm = LLMApp(pool=ModelPool(Settings(models=models)), adapters=(OPENAI, ANTHROPIC, OLLAMA))
    async with llm.lifespan():
        yield llm


def transport(app: LLMApp) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app))


@pytest.fixture
async def gpt(app: LLMApp) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(
        base_url="http://t", api_key="-", http_client=transport(app), max_retries=0
    ) as client:
        yield client


async def test_openai_chat(gpt: openai.AsyncOpenAI) -> None:
    image = {"type": "image_url", "image_url": {"url": DATA_URL, "detail": "low"}}
    asked = await gpt.chat.completions.create(
        model="vision",
        max_tokens=4,
        temperature=0,
        messages=[{"role": "user", "content": [{"type": "text", "text": QUESTION}, image]}],  # type: ignore[list-item]
    )
    plain = await gpt.chat.completions.create(
        model="vision", max_tokens=4, temperature=0, messages=[{"role": "user", "content": QUESTION}]
    )
    assert asked.usage is not None and plain.usage is not None
    assert asked.usage.prompt_tokens - plain.usage.prompt_tokens == image_tokens()
    assert asked.choices[0].message.content is not None


async def test_openai_responses(gpt: openai.AsyncOpenAI) -> None:
    content = [
        {"type": "input_text", "text": QUESTION},
        {"type": "input_image", "image_url": DATA_URL, "detail": "auto"},
    ]
    asked = await gpt.responses.create(
        model="vision", max_output_tokens=4, input=[{"role": "user", "content": content}]
    )  # type: ignore[list-item,misc]
    plain = await gpt.responses.create(model="vision", max_output_tokens=4, input=QUESTION)
    assert asked.usage is not None and plain.usage is not None
    assert asked.usage.input_tokens - plain.usage.input_tokens == image_tokens()


async def test_anthropic_messages(app: LLMApp) -> None:
    async def at_v1(scope: Any, receive: Any, send: Any) -> None:  # the app as mounted at /v1
        await app({**scope, "root_path": "/v1", "path": scope["path"].removeprefix("/v1")}, receive, send)

    http = httpx2.AsyncClient(transport=httpx2.ASGITransport(app=at_v1))  # the SDK's own httpx
    async with anthropic.AsyncAnthropic(base_url="http://t/v1", api_key="-", http_client=http) as claude:
        image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": B64}}
        asked = await claude.messages.create(
            model="vision",
            max_tokens=4,
            messages=[{"role": "user", "content": [image, {"type": "text", "text": QUESTION}]}],  # type: ignore[list-item]
        )
        counted = await claude.messages.count_tokens(
            model="vision",
            messages=[{"role": "user", "content": [image, {"type": "text", "text": QUESTION}]}],  # type: ignore[list-item]
        )
        usage = asked.usage  # the prompt's tokens: those read now and those the cache held
        read = usage.input_tokens + (usage.cache_read_input_tokens or 0) + (usage.cache_creation_input_tokens or 0)
        assert read == counted.input_tokens
        with pytest.raises(anthropic.BadRequestError) as refused:
            await claude.messages.create(
                model="text",
                max_tokens=4,
                messages=[{"role": "user", "content": [image]}],  # type: ignore[list-item]
            )
        assert "messages[0].content[0]" in str(refused.value) and "takes no images" in str(refused.value)


async def test_ollama_chat_and_generate(app: LLMApp) -> None:
    client = ollama.AsyncClient(host="http://t", transport=httpx.ASGITransport(app=app))
    chat = await client.chat(
        model="vision",
        messages=[{"role": "user", "content": QUESTION, "images": [PICTURE]}],
        options={"num_predict": 4},
    )
    assert chat.done and chat.message.content  # its prompt count is what the cache did not hold, as in Ollama
    generated = await client.generate(model="vision", prompt=QUESTION, images=[PICTURE], options={"num_predict": 4})
    assert generated.done
    with pytest.raises(ollama.ResponseError) as refused:
        await client.generate(model="vision", prompt=QUESTION, images=[base64.b64encode(b"not an image").decode()])
    assert refused.value.status_code == 400 and "images[0]" in refused.value.error
