"""Every official client through a gateway whose model runs on a real upstream server: a second
`asgi-llm serve`, and llama-cpp-python's own server (which speaks neither Responses, Anthropic
nor Ollama itself). Greedy, a few tokens: whole and streamed answers must agree."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import ollama
import openai
import pytest

Gateway = Any  # this folder's conftest.Gateway: url, upstream, usage records

HI = [{"role": "user", "content": "Say hello."}]
TOKENS = 8
GREEDY = {"temperature": 0}


@pytest.fixture
def oai(gateway: Gateway) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="unused", max_retries=0, timeout=60) as sdk:
        yield sdk


def test_openai_chat_whole_and_streamed(oai: openai.OpenAI) -> None:
    whole = oai.chat.completions.create(model="remote", messages=HI, max_tokens=TOKENS, temperature=0)
    stream = oai.chat.completions.create(
        model="remote",
        messages=HI,
        max_tokens=TOKENS,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert whole.choices[0].message.content and text == whole.choices[0].message.content
    assert whole.model == "remote" and whole.choices[0].finish_reason == "length"
    assert whole.usage is not None and whole.usage.completion_tokens == TOKENS and whole.usage.prompt_tokens > 0
    usage = chunks[-1].usage
    assert usage is not None and usage.completion_tokens == TOKENS


def test_openai_completions_and_count(oai: openai.OpenAI, gateway: Gateway) -> None:
    whole = oai.completions.create(model="remote", prompt="Once upon a time", max_tokens=TOKENS, temperature=0)
    parts = list(
        oai.completions.create(model="remote", prompt="Once upon a time", max_tokens=TOKENS, temperature=0, stream=True)
    )
    assert whole.choices[0].text and "".join(p.choices[0].text for p in parts if p.choices) == whole.choices[0].text
    with anthropic.Anthropic(base_url=gateway.url, api_key="unused", max_retries=0) as claude:
        counted = claude.messages.count_tokens(model="remote", messages=HI)  # type: ignore[arg-type]
    direct = httpx.post(
        f"{gateway.upstream.base_url}/chat/completions",
        json={"model": gateway.model, "messages": HI, "max_tokens": 1},
        timeout=60,
    )
    assert counted.input_tokens == direct.json()["usage"]["prompt_tokens"] > 0  # exact, the chat template applied


def test_openai_responses_whole_and_streamed(oai: openai.OpenAI) -> None:
    whole = oai.responses.create(model="remote", input="Say hello.", max_output_tokens=16, temperature=0)
    events = list(
        oai.responses.create(model="remote", input="Say hello.", max_output_tokens=16, temperature=0, stream=True)
    )
    assert whole.output_text and whole.status in ("completed", "incomplete")
    last = events[-1]
    assert last.type in ("response.completed", "response.incomplete")
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == last.response.output_text
    assert last.response.output_text[:8] == whole.output_text[:8]  # greedy; a server's batching may shift a late token
    assert whole.usage is not None and whole.usage.output_tokens > 0


def test_anthropic_messages_whole_and_streamed(gateway: Gateway) -> None:
    with anthropic.Anthropic(base_url=gateway.url, api_key="unused", max_retries=0, timeout=60) as claude:
        whole = claude.messages.create(model="remote", max_tokens=TOKENS, messages=HI, extra_body=GREEDY)  # type: ignore[arg-type]
        with claude.messages.stream(model="remote", max_tokens=TOKENS, messages=HI, extra_body=GREEDY) as stream:  # type: ignore[arg-type]
            text = "".join(stream.text_stream)
            final = stream.get_final_message()
    assert whole.content[0].type == "text" and whole.content[0].text == text
    assert whole.stop_reason == final.stop_reason == "max_tokens"
    assert whole.usage.output_tokens == final.usage.output_tokens == TOKENS


def test_ollama_chat_and_generate_whole_and_streamed(gateway: Gateway) -> None:
    client = ollama.Client(host=gateway.url, timeout=60)
    options = {"temperature": 0, "num_predict": TOKENS}
    whole = client.chat(model="remote", messages=HI, options=options)
    parts = list(client.chat(model="remote", messages=HI, options=options, stream=True))
    assert whole.message.content and "".join(p.message.content or "" for p in parts) == whole.message.content
    assert parts[-1].done and parts[-1].eval_count == whole.eval_count == TOKENS
    generated = client.generate(model="remote", prompt="Say hello.", options=options)
    assert generated.response and generated.eval_count == TOKENS
    client.close()


def test_model_list_and_health_show_no_upstream_address(gateway: Gateway) -> None:
    models = httpx.get(f"{gateway.url}/v1/models", timeout=10).json()
    assert [m["id"] for m in models["data"]] == ["remote"]
    health = httpx.get(f"{gateway.url}/v1/health", timeout=10)
    assert health.status_code == 200
    (model,) = health.json()["models"]
    assert model["backend"]["backend"] == "upstream" and model["backend"]["replicas"][0]["healthy"] is True
    port = gateway.upstream.base_url.rsplit(":", 1)[1]
    assert port not in health.text and "127.0.0.1" not in health.text


def test_embeddings_through_an_asgi_llm_upstream(asgi_llm_gateway: Gateway) -> None:
    gateway = asgi_llm_gateway
    with openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="unused", max_retries=0) as sdk:
        reply = sdk.embeddings.create(model="remote", input=["hello", "a longer sentence here"])
    direct = httpx.post(
        f"{gateway.upstream.base_url}/embeddings",
        json={"model": "default", "input": ["hello", "a longer sentence here"]},
        timeout=30,
    ).json()
    assert len(reply.data) == 2
    for ours, theirs in zip(reply.data, direct["data"]):  # the SDK fetches base64 float32: equal to float32 precision
        assert ours.embedding == pytest.approx(theirs["embedding"], abs=1e-6)
    assert reply.usage.prompt_tokens == direct["usage"]["prompt_tokens"]


def test_usage_records_equal_the_upstreams_own(asgi_llm_gateway: Gateway) -> None:
    """The gateway's usage records carry exactly what the upstream reported (and recorded itself)."""
    gateway = asgi_llm_gateway
    before_gw, before_up = len(gateway.records()), len(_generations(gateway.upstream.records()))
    with openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="unused", max_retries=0, timeout=60) as sdk:
        sdk.chat.completions.create(model="remote", messages=HI, max_tokens=TOKENS, temperature=0)
        sdk.chat.completions.create(model="remote", messages=HI, max_tokens=5, temperature=0)  # a cached prompt now
        list(sdk.chat.completions.create(model="remote", messages=HI, max_tokens=6, temperature=0.7, stream=True))
        sdk.embeddings.create(model="remote", input="hello there")
    with (
        anthropic.Anthropic(base_url=gateway.url, api_key="unused", max_retries=0) as claude,
        claude.messages.stream(model="remote", max_tokens=4, messages=HI) as stream,  # type: ignore[arg-type]
    ):
        stream.get_final_message()

    def settled() -> bool:
        return (
            len(gateway.records()) - before_gw >= 5 and len(_generations(gateway.upstream.records())) - before_up >= 5
        )

    deadline = time.monotonic() + 10
    while not settled():
        assert time.monotonic() < deadline, "usage records did not arrive"
        time.sleep(0.1)
    ours = [_tokens(r) for r in gateway.records()[before_gw:]]
    theirs = [_tokens(r) for r in _generations(gateway.upstream.records())[before_up:]]
    assert ours == theirs
    assert any(r[2] > 0 for r in ours), "a repeated prompt reports cached tokens"
    assert all(r["model"] == "remote" and r["status"] == 200 for r in gateway.records()[before_gw:])


def _generations(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if r["prompt_tokens"] or r["completion_tokens"]]


def _tokens(record: dict[str, Any]) -> tuple[int, int, int]:
    return record["prompt_tokens"], record["completion_tokens"], record["cached_tokens"]


def test_asgi_llm_serve_goes_upstream_by_one_variable(asgi_llm_upstream: Any, asgi_llm_serve: Any) -> None:
    env = {**os.environ, "ASGI_LLM_BASE_URL": asgi_llm_upstream.base_url, "ASGI_LLM_UPSTREAM_MODEL": "default"}
    with asgi_llm_serve(env=env) as served:
        health = httpx.get(f"{served.url}/health", timeout=10).json()
        with openai.OpenAI(base_url=f"{served.url}/v1", api_key="unused", max_retries=0, timeout=60) as sdk:
            reply = sdk.chat.completions.create(model="default", messages=HI, max_tokens=TOKENS, temperature=0)
    assert health["models"][0]["backend"]["backend"] == "upstream"
    assert reply.usage is not None and reply.usage.completion_tokens == TOKENS


def test_asgi_llm_serve_discovers_the_upstreams_models(
    asgi_llm_upstream: Any, asgi_llm_serve: Any, tmp_path: Path
) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text(f'[[models]]\nbase_url = "{asgi_llm_upstream.base_url}"\ndiscover = true\nprefix = "up/"\n')
    with asgi_llm_serve("--config", str(config)) as served:
        listed = httpx.get(f"{served.url}/v1/models", timeout=10).json()
        with openai.OpenAI(base_url=f"{served.url}/v1", api_key="unused", max_retries=0, timeout=60) as sdk:
            reply = sdk.chat.completions.create(
                model="up/SmolLM2-135M-Instruct", messages=HI, max_tokens=2, temperature=0
            )
    assert [m["id"] for m in listed["data"]] == ["up/SmolLM2-135M-Instruct"]
    assert reply.choices[0].message.content


@pytest.mark.anyio
async def test_a_mounted_app_discovers_the_upstreams_models_in_its_lifespan(asgi_llm_upstream: Any) -> None:
    from asgi_lifespan import LifespanManager
    from starlette.applications import Starlette
    from starlette.routing import Mount

    from asgi_llm import LLMApp
    from asgi_llm.config import ModelConfig, Settings

    config = ModelConfig(base_url=asgi_llm_upstream.base_url, discover=True, prefix="up/")
    llm = LLMApp(Settings(models=(config,)))
    host = Starlette(routes=[Mount("/v1", app=llm)], lifespan=llm.lifespan)
    async with LifespanManager(host), httpx.AsyncClient(transport=httpx.ASGITransport(app=host)) as http:
        listed = (await http.get("http://host/v1/models")).json()
        async with openai.AsyncOpenAI(base_url="http://host/v1", api_key="unused", http_client=http) as sdk:
            reply = await sdk.chat.completions.create(
                model="up/SmolLM2-135M-Instruct", messages=HI, max_tokens=2, temperature=0
            )
            with pytest.raises(openai.NotFoundError):
                await sdk.chat.completions.create(model=config.id, messages=HI, max_tokens=2)
    assert [m["id"] for m in listed["data"]] == ["up/SmolLM2-135M-Instruct"]
    assert reply.model == "up/SmolLM2-135M-Instruct" and reply.choices[0].message.content
