"""LoRA adapters with the real model: an adapter GGUF written here with gguf-py for the packaged
model's shapes. Scale 0 gives the base model's greedy text, scale 1 another text, the same each
time; requests of different scales, one after the other or at once, each get their own (they never
share a decode: llama.cpp sets adapters per context); `/lora-adapters` lists and (operator keys)
sets the default scales; an unknown id is a 400; an adapter for another base fails the load,
naming its file."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

import httpx
import openai
import pytest
from pydantic import SecretStr

from asgi_llm import LLMApp, ModelConfig, ModelPool, Settings
from asgi_llm.adapters.ollama import OLLAMA
from asgi_llm.adapters.openai import OPENAI
from asgi_llm.config import ApiKeyConfig
from asgi_llm.engines.llamacpp.lora import LoraAdapterError

from .gguf_writers import write_lora

pytestmark = pytest.mark.model
CHAT = [{"role": "user", "content": "Name a color."}]
OPERATOR, USER = "op-key", "user-key"


@pytest.fixture(scope="module")
def lora_url(
    tmp_path_factory: pytest.TempPathFactory, serve_host: Callable[[LLMApp, LLMApp], AbstractContextManager[str]]
) -> Iterator[str]:
    folder = tmp_path_factory.mktemp("lora")
    adapter = write_lora(folder / "noise.gguf")
    small = {"n_ctx": 512, "n_threads": 1, "prompt_cache_mib": 0}
    settings = Settings(
        models=(
            ModelConfig(id="tuned", parallel=2, lora=({"id": "noise", "path": str(adapter), "scale": 0.0},), **small),
            ModelConfig(id="base", parallel=1, **small),
        ),
        api_keys=(
            ApiKeyConfig(name="ops", key=SecretStr(OPERATOR), operator=True),
            ApiKeyConfig(name="user", key=SecretStr(USER)),
        ),
    )
    pool = ModelPool(settings)
    with serve_host(LLMApp(pool=pool, adapters=(OPENAI,)), LLMApp(pool=pool, adapters=(OLLAMA,), health_path=None)) as url:
        yield url


def chat(url: str, model: str = "tuned", **extra: Any) -> str:
    with openai.OpenAI(base_url=f"{url}/v1", api_key=USER, max_retries=0, timeout=60) as sdk:
        reply = sdk.chat.completions.create(model=model, messages=CHAT, max_tokens=5, temperature=0, extra_body=extra)
    return reply.choices[0].message.content or ""


def lora(url: str, scale: float) -> list[dict[str, Any]]:
    return [{"id": "noise", "scale": scale}]


def test_scale_0_is_the_base_model_and_scale_1_changes_it_deterministically(lora_url: str) -> None:
    base = chat(lora_url, "base")
    assert chat(lora_url) == base  # the default scale, 0
    assert chat(lora_url, lora=lora(lora_url, 0.0)) == base
    tuned = chat(lora_url, lora=lora(lora_url, 1.0))
    assert tuned != base and chat(lora_url, lora=lora(lora_url, 1.0)) == tuned
    for scales in ([1.0, 0.0], [0.0, 1.0]):  # sent at once (two sequences free): never one decode
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            texts = list(pool.map(lambda s: chat(lora_url, lora=lora(lora_url, s)), scales))
        assert texts == [tuned if s else base for s in scales]


def test_completions_take_lora_too(lora_url: str) -> None:
    with openai.OpenAI(base_url=f"{lora_url}/v1", api_key=USER, max_retries=0, timeout=60) as sdk:
        texts = [
            sdk.completions.create(
                model="tuned", prompt="The sky is", max_tokens=6, temperature=0, extra_body={"lora": lora(lora_url, s)}
            ).choices[0].text
            for s in (0.0, 1.0)
        ]
    assert texts[0] != texts[1]


def test_lora_adapters_lists_and_an_operator_sets_the_defaults(lora_url: str) -> None:
    def call(method: str, key: str, body: Any = None) -> httpx.Response:
        headers = {"authorization": f"Bearer {key}"}
        return httpx.request(method, f"{lora_url}/v1/lora-adapters?model=tuned", json=body, headers=headers, timeout=60)

    assert call("GET", USER).json() == [{"id": "noise", "scale": 0.0, "model": "tuned"}]
    refused = call("POST", USER, {"lora": [{"id": "noise", "scale": 1.0}]})
    assert refused.status_code == 403 and "operator" in refused.json()["error"]["message"], refused.text
    base = chat(lora_url)
    assert call("POST", OPERATOR, {"lora": [{"id": "noise", "scale": 1.0}]}).json() == [
        {"id": "noise", "scale": 1.0, "model": "tuned"}
    ]
    try:
        assert chat(lora_url) == chat(lora_url, lora=lora(lora_url, 1.0)) != base  # the new default
    finally:
        call("POST", OPERATOR, {"lora": [{"id": "noise", "scale": 0.0}]})
    unknown = call("POST", OPERATOR, {"lora": [{"id": "nope", "scale": 1.0}]})
    assert unknown.status_code == 400 and unknown.json()["error"]["param"] == "lora[0].id"


@pytest.mark.parametrize(
    ("model", "extra", "param"),
    [
        ("tuned", {"lora": [{"id": "nope", "scale": 1.0}]}, "lora[0].id"),
        ("tuned", {"lora": [{"id": "noise", "scale": 1.0, "path": "/x"}]}, "lora[0].path"),
        ("tuned", {"lora": [{"id": "noise"}]}, "lora[0].scale"),
        ("base", {"lora": [{"id": "noise", "scale": 1.0}]}, "lora"),  # a model without adapters
    ],
)
def test_a_bad_lora_is_a_400_naming_it(lora_url: str, model: str, extra: dict[str, Any], param: str) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        chat(lora_url, model, **extra)
    assert refused.value.body["param"] == param  # type: ignore[index]


@pytest.mark.anyio
async def test_an_adapter_for_another_base_fails_the_load_naming_its_file(tmp_path: Any) -> None:
    from asgi_llm.engines.inference_thread import InferenceThread
    from asgi_llm.engines.llamacpp import LlamaCppEngine

    wrong = write_lora(tmp_path / "wrong.gguf", width=64)
    thread = InferenceThread()
    thread.start()
    config = ModelConfig(id="m", n_ctx=256, n_threads=1, parallel=1, lora=({"id": "wrong", "path": str(wrong)},))
    engine = LlamaCppEngine(config, thread)
    try:
        with pytest.raises(LoraAdapterError, match="wrong.gguf"):
            await engine.load()
    finally:
        await engine.close()
        await thread.stop()
