"""Embeddings' `dimensions`: a size the model lists (`embedding_dimensions`, a Matryoshka model's)
shortens each vector to its first values, back to unit length; any other size is a 400 naming
`dimensions`; `/models` shows the sizes. Through the official openai and ollama SDKs."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator

import httpx
import ollama
import openai
import pydantic
import pytest

from asgi_llm import LLMApp, ModelConfig, ModelPool, Settings
from asgi_llm.adapters.ollama import OLLAMA
from asgi_llm.adapters.openai import OPENAI
from asgi_llm.core import EmbeddingRequest, EmbeddingResult
from asgi_llm.core.events import Embedding
from asgi_llm.engines.fake import FakeEngine

pytestmark = pytest.mark.anyio

FULL = (0.1, 0.2, -0.3, 0.4, 0.5, -0.6, 0.7, 0.8)  # what the engine gives, of 8 values


class VectorEngine(FakeEngine):
    async def embed(self, request: EmbeddingRequest) -> EmbeddingResult:
        return EmbeddingResult(tuple(Embedding(FULL, tokens=2) for _ in request.inputs))


def unit(vector: tuple[float, ...]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in vector))
    return [x / norm for x in vector]


def llm() -> LLMApp:
    models = (
        ModelConfig(id="nested", path="unused.gguf", embeddings=True, embedding_dimensions=(8, 4, 2, 16)),
        ModelConfig(id="fixed", path="unused.gguf", embeddings=True),
    )
    pool = ModelPool(Settings(models=models), engine_factory=lambda c, t: VectorEngine(c, t))
    return LLMApp(pool=pool, adapters=(OPENAI, OLLAMA))


@pytest.fixture
async def app() -> AsyncIterator[LLMApp]:
    served = llm()
    async with served.lifespan():
        yield served


@pytest.fixture
async def sdk(app: LLMApp) -> AsyncIterator[openai.AsyncOpenAI]:
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app))
    async with openai.AsyncOpenAI(base_url="http://t", api_key="unused", http_client=http, max_retries=0) as client:
        yield client


@pytest.mark.parametrize("encoding", ["float", "base64"])  # the SDK asks for base64 unless told, and decodes it
async def test_a_listed_size_shortens_and_renormalises(sdk: openai.AsyncOpenAI, encoding: str) -> None:
    extra = {"encoding_format": encoding} if encoding == "float" else {}
    reply = await sdk.embeddings.create(model="nested", input=["a", "b"], dimensions=4, **extra)  # type: ignore[arg-type]
    assert [len(e.embedding) for e in reply.data] == [4, 4]
    for item in reply.data:
        assert item.embedding == pytest.approx(unit(FULL[:4]), rel=1e-6)
        assert math.sqrt(sum(x * x for x in item.embedding)) == pytest.approx(1.0)
    whole = await sdk.embeddings.create(model="nested", input="a", encoding_format="float")
    assert whole.data[0].embedding == list(FULL)  # no dimensions: the engine's vector as it is
    assert (await sdk.embeddings.create(model="nested", input="a", dimensions=8)).data[0].embedding == pytest.approx(
        unit(FULL)
    )


@pytest.mark.parametrize(
    ("model", "size", "message"),
    [
        ("nested", 3, "must be one of 8, 4, 2, 16"),
        ("fixed", 4, "lists no 'dimensions'"),
        ("nested", 16, "gives embeddings of 8 values"),  # listed, but longer than the model's vectors
    ],
)
async def test_any_other_size_is_a_400_naming_dimensions(
    sdk: openai.AsyncOpenAI, model: str, size: int, message: str
) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        await sdk.embeddings.create(model=model, input="a", dimensions=size)
    error = refused.value.body
    assert isinstance(error, dict) and error["param"] == "dimensions" and error["type"] == "invalid_request_error"
    assert message in error["message"]


async def test_models_show_the_sizes(sdk: openai.AsyncOpenAI) -> None:
    listed = {m.id: m.to_dict().get("embedding_dimensions") for m in (await sdk.models.list()).data}
    assert listed == {"nested": [8, 4, 2, 16], "fixed": None}
    assert (await sdk.models.retrieve("nested")).to_dict()["embedding_dimensions"] == [8, 4, 2, 16]


async def test_ollama_embed_takes_dimensions(app: LLMApp) -> None:
    client = ollama.AsyncClient(host="http://t", transport=httpx.ASGITransport(app=app))
    reply = await client.embed(model="nested", input=["a", "b"], dimensions=2)
    assert [list(v) for v in reply.embeddings] == [pytest.approx(unit(FULL[:2]))] * 2
    assert len((await client.embed(model="nested", input="a", dimensions=0)).embeddings[0]) == 8  # 0: Ollama's "none"
    with pytest.raises(ollama.ResponseError) as refused:
        await client.embed(model="nested", input="a", dimensions=5)
    assert refused.value.status_code == 400 and "'dimensions' must be one of" in refused.value.error


async def test_the_in_process_client_gets_the_shortened_vectors(app: LLMApp) -> None:
    embedded = await app.client().embed(["a"], model="nested", dimensions=4)
    assert [len(v) for v in embedded.vectors] == [4] and list(embedded.vectors[0]) == pytest.approx(unit(FULL[:4]))


def test_the_sizes_are_checked_in_the_configuration() -> None:
    with pytest.raises(pydantic.ValidationError, match="embedding_dimensions needs embeddings"):
        ModelConfig(id="chat", embedding_dimensions=(256,))
    with pytest.raises(pydantic.ValidationError, match="greater than or equal to 1"):
        ModelConfig(id="e", embeddings=True, embedding_dimensions=(256, 0))
