"""`asgi-llm serve` with no model option: the packaged default model over real HTTP, at /v1."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest


@pytest.fixture(scope="module")
def served(asgi_llm_serve: Any) -> Iterator[str]:
    with asgi_llm_serve("--n-ctx", "1024") as server:
        yield server.url


def test_openai_sdk_against_serve(served: str) -> None:
    with openai.OpenAI(base_url=f"{served}/v1", api_key="unused", max_retries=0) as client:
        assert [m.id for m in client.models.list()] == ["SmolLM2-135M-Instruct"]
        reply = client.chat.completions.create(
            model="default", messages=[{"role": "user", "content": "Hi"}], max_tokens=5, temperature=0
        )
        assert reply.choices[0].message.content and reply.usage and reply.usage.completion_tokens <= 5
        stream = client.chat.completions.create(
            model="default", messages=[{"role": "user", "content": "Hi"}], max_tokens=5, temperature=0, stream=True
        )
        assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == reply.choices[0].message.content
        completion = client.completions.create(model="default", prompt="The sky is", max_tokens=3)
        assert completion.choices[0].text
        embedding = client.embeddings.create(model="default", input="hello")
        assert len(embedding.data[0].embedding) == 576


def test_health_answers_at_the_root_and_under_v1(served: str) -> None:
    assert httpx.get(f"{served}/health").json()["status"] == "ok"
    assert httpx.get(f"{served}/v1/health").json()["status"] == "ok"


def test_responses_anthropic_and_ollama_clients_against_serve(served: str) -> None:
    import anthropic
    import ollama

    with openai.OpenAI(base_url=f"{served}/v1", api_key="unused", max_retries=0) as client:
        response = client.responses.create(model="default", input="Hi", max_output_tokens=8)
        assert response.output_text and client.responses.retrieve(response.id).id == response.id
    with anthropic.Anthropic(base_url=served, api_key="unused", max_retries=0) as claude:
        message = claude.messages.create(model="default", max_tokens=8, messages=[{"role": "user", "content": "Hi"}])
        assert message.content[0].type == "text" and message.content[0].text
        assert claude.messages.count_tokens(model="default", messages=[{"role": "user", "content": "Hi"}]).input_tokens > 0
    with ollama.Client(host=served) as local:
        chat = local.chat(model="default", messages=[{"role": "user", "content": "Hi"}], options={"num_predict": 8})
        assert chat.done and chat.message.content
        assert any(m.model and m.model.startswith("SmolLM2-135M-Instruct") for m in local.list().models)


def test_the_web_page_and_each_mounts_openapi_document(served: str) -> None:
    page = httpx.get(f"{served}/ui")
    assert page.status_code == 200 and '<base href="/ui/">' in page.text
    root = httpx.get(f"{served}/openapi.json").json()
    assert {"/api/chat", "/chat/completions", "/messages", "/ui"} <= set(root["paths"]) and root["servers"] == [{"url": "/"}]
    v1 = httpx.get(f"{served}/v1/openapi.json").json()
    assert v1["servers"] == [{"url": "/v1"}] and "/api/chat" not in v1["paths"] and "/ui" not in v1["paths"]


def test_serve_threads_follow_affinity_and_its_sleeping_openmp_threads(served: str) -> None:
    """`asgi-llm serve` owns its process: OpenMP threads sleep at barriers there (unless the
    environment says otherwise), so every core this process may use decodes."""
    backend = httpx.get(f"{served}/health").json()["models"][0]["backend"]
    cores = len(os.sched_getaffinity(0))
    chosen = "OMP_WAIT_POLICY" in os.environ or "GOMP_SPINCOUNT" in os.environ
    policy = os.environ.get("OMP_WAIT_POLICY", "") if chosen else "passive"  # what serve sets when nothing is chosen
    assert backend["n_threads"] == (cores if policy.lower() == "passive" else max(1, cores - 1))
    assert 1 <= backend["threads_now"] <= backend["n_threads"]  # the governor may have given some up
