"""API keys, usage records and metrics end to end: `asgi-llm serve` with keys, the real model,
real uvicorn, and the official SDKs with and without a key."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import anthropic
import httpx
import ollama
import openai
import pytest

from asgi_llm.middleware import Ledger, UsageRecord

CLI_KEY, ENV_KEY, OPERATOR_KEY = "sk-e2e-cli-0123456789", "sk-e2e-env-0123456789", "sk-e2e-operator-0123456789"
HI = [{"role": "user", "content": "Say hi."}]


@dataclass
class Served:
    url: str
    ledger: str


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, asgi_llm_serve: Any) -> Iterator[Served]:
    folder = tmp_path_factory.mktemp("keyed")
    ledger = folder / "ledger.sqlite3"
    config = folder / "asgi-llm.toml"
    config.write_text(
        f'usage_ledger = "{ledger}"\n\n[limits]\nmax_tokens = 16\n\n[[models]]\naliases = ["default"]\nn_ctx = 1024\n'
        f'\n[[api_keys]]\nname = "operator"\nkey = "{OPERATOR_KEY}"\noperator = true\n'
    )
    env = {**os.environ, "ASGI_LLM_API_KEYS": f"ops={ENV_KEY}"}
    with asgi_llm_serve("--config", str(config), "--api-key", f"team={CLI_KEY}", env=env) as server:
        yield Served(server.url, str(ledger))
    assert CLI_KEY not in server.output and ENV_KEY not in server.output and OPERATOR_KEY not in server.output


def test_the_openai_sdk_with_a_key(served: Served) -> None:
    with openai.OpenAI(base_url=f"{served.url}/v1", api_key=CLI_KEY, max_retries=0) as client:
        reply = client.chat.completions.create(model="default", messages=HI, max_tokens=4, temperature=0)
        assert reply.choices[0].message.content and reply.usage and reply.usage.completion_tokens <= 4
        stream = client.chat.completions.create(model="default", messages=HI, max_tokens=4, temperature=0, stream=True)
        assert (
            "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == reply.choices[0].message.content
        )
        capped = client.chat.completions.create(model="default", messages=HI)  # no max_tokens: the configured 16
        assert capped.usage and capped.usage.completion_tokens <= 16


def test_the_openai_sdk_without_a_valid_key_gets_401(served: Served) -> None:
    with (
        openai.OpenAI(base_url=f"{served.url}/v1", api_key="sk-wrong", max_retries=0) as client,
        pytest.raises(openai.AuthenticationError) as caught,
    ):
        client.chat.completions.create(model="default", messages=HI, max_tokens=4)
    assert caught.value.status_code == 401
    assert caught.value.body == {
        "message": "Invalid API key.",
        "type": "authentication_error",
        "param": None,
        "code": "invalid_api_key",
        "request_id": caught.value.request_id,
    }
    missing = httpx.post(f"{served.url}/v1/chat/completions", json={"model": "default", "messages": HI})
    assert missing.status_code == 401 and missing.headers["www-authenticate"] == "Bearer"
    assert httpx.get(f"{served.url}/v1/models").status_code == 401


def test_anthropic_and_ollama_clients_with_and_without_a_key(served: Served) -> None:
    with anthropic.Anthropic(base_url=served.url, api_key=ENV_KEY, max_retries=0) as claude:
        message = claude.messages.create(model="default", max_tokens=4, messages=HI)
        assert message.content[0].type == "text"
    with anthropic.Anthropic(base_url=served.url, api_key="sk-wrong", max_retries=0) as claude:
        with pytest.raises(anthropic.AuthenticationError) as caught:
            claude.messages.create(model="default", max_tokens=4, messages=HI)
        assert caught.value.body == {
            "type": "error",
            "error": {"type": "authentication_error", "message": "Invalid API key."},
            "request_id": caught.value.response.headers["x-request-id"],
        }
    with ollama.Client(host=served.url, headers={"Authorization": f"Bearer {ENV_KEY}"}) as local:
        assert local.chat(model="default", messages=HI, options={"num_predict": 4}).message.content
    with ollama.Client(host=served.url) as anonymous:
        with pytest.raises(ollama.ResponseError) as refused:
            anonymous.chat(model="default", messages=HI)
        assert refused.value.status_code == 401


def test_usage_lands_in_the_ledger_and_in_metrics(served: Served) -> None:
    with openai.OpenAI(base_url=f"{served.url}/v1", api_key=ENV_KEY, max_retries=0) as client:
        client.completions.create(model="default", prompt="The sky is", max_tokens=3)
    deadline = time.monotonic() + 10
    while True:
        records = asyncio.run(Ledger(served.ledger).records())
        ops = [r for r in records if r.key == "ops" and r.endpoint == "/completions"]
        if ops or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    (record,) = ops
    assert isinstance(record, UsageRecord)
    assert (record.protocol, record.model, record.status, record.disconnected) == (
        "openai",
        "SmolLM2-135M-Instruct",
        200,
        False,
    )
    assert record.prompt_tokens > 0 and 0 < record.completion_tokens <= 3
    assert record.time_to_first_token is not None and record.time_to_first_token <= record.duration
    assert {r.key for r in records} >= {"team", "ops", None}  # None: the refused requests
    assert all(r.endpoint != "/health" for r in records)
    tenant = httpx.get(f"{served.url}/metrics", headers={"x-api-key": CLI_KEY})
    assert tenant.status_code == 403 and "operator" in tenant.json()["error"]  # Ollama's envelope at the root
    metrics = httpx.get(f"{served.url}/metrics", headers={"x-api-key": OPERATOR_KEY})
    assert metrics.status_code == 200
    text = metrics.text
    assert 'asgi_llm_completion_tokens_total{protocol="openai",model="SmolLM2-135M-Instruct",key="team"}' in text
    assert 'asgi_llm_model_loaded{model="SmolLM2-135M-Instruct"} 1' in text
    assert 'asgi_llm_request_errors_total{protocol="openai",model="",key="",status="401"}' in text
    assert CLI_KEY not in text and ENV_KEY not in text


def test_the_tokenizer_routes_need_a_key_like_models_does(served: Served) -> None:
    asked: dict[str, Any] = {"/tokenize": {"content": "Ünïcödé"}, "/detokenize": {"tokens": [28]}}
    asked["/apply-template"] = {"messages": HI}
    for path, body in asked.items():
        assert httpx.post(f"{served.url}/v1{path}", json=body).status_code == 401
        key = {"authorization": f"Bearer {CLI_KEY}"}
        keyed = httpx.post(f"{served.url}/v1{path}", json=body, headers=key, timeout=60)
        assert keyed.status_code == 200, keyed.text
