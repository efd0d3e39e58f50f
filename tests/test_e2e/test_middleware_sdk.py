"""API keys, limits, usage and metrics tried as a new user would: `asgi-llm serve` with a config
file, the real default model, and the official OpenAI, Anthropic and Ollama clients — what
test_middleware.py does not cover: wrong keys everywhere, a key's model list, a per-minute limit,
a token budget across a restart, the ledger against the SDKs' own usage, and `/metrics` read with
Prometheus' own parser."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import httpx
import ollama
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from asgi_llm.middleware import Ledger, UsageRecord

ACCT, NARROW, SLOW, BUDGET = (f"sk-sdk-{name}-0123456789" for name in ("acct", "narrow", "slow", "budget"))
HI = [{"role": "user", "content": "Say hi."}]
CONFIG = """\
usage_ledger = "{ledger}"

[[models]]
aliases = ["default"]
n_ctx = 1024
n_threads = 1  # tiny generations; one thread stays fast when other processes share the cores

[[models]]
id = "other"
n_ctx = 512
load = "lazy"

[[api_keys]]
name = "acct"
key = "{acct}"
operator = true

[[api_keys]]
name = "narrow"
key = "{narrow}"
models = ["other"]

[[api_keys]]
name = "slow"
key = "{slow}"
[api_keys.limits]
requests_per_minute = 2

[[api_keys]]
name = "budget"
key = "{budget}"
[api_keys.limits]
tokens_total = 20
"""


@dataclass
class Served:
    url: str
    ledger: str


def _write_config(folder: Path) -> tuple[Path, Path]:
    ledger = folder / "ledger.sqlite3"
    config = folder / "asgi-llm.toml"
    config.write_text(CONFIG.format(ledger=ledger, acct=ACCT, narrow=NARROW, slow=SLOW, budget=BUDGET))
    return config, ledger


@pytest.fixture(scope="module")
def serve(asgi_llm_serve: Any) -> Callable[[Path, Path], AbstractContextManager[Served]]:
    """`asgi-llm serve` on this config; never shows a key in its output."""

    @contextmanager
    def start(config: Path, ledger: Path) -> Iterator[Served]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("ASGI_LLM_")}
        with asgi_llm_serve("--config", str(config), env=env) as server:
            yield Served(server.url, str(ledger))
        assert not any(key in server.output for key in (ACCT, NARROW, SLOW, BUDGET))

    return start


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, serve: Any) -> Iterator[Served]:
    with serve(*_write_config(tmp_path_factory.mktemp("sdk"))) as server:
        yield server


def _records(ledger: str, key: str, count: int) -> list[UsageRecord]:
    """The ledger's records for `key`, once there are `count` of them (records land after the response)."""
    deadline = time.monotonic() + 10
    while True:
        records = [r for r in asyncio.run(Ledger(ledger).records()) if r.key == key]
        if len(records) >= count or time.monotonic() > deadline:
            return records
        time.sleep(0.05)


def test_a_wrong_key_is_an_authentication_error_in_every_sdk(served: Served) -> None:
    with (
        openai.OpenAI(base_url=f"{served.url}/v1", api_key="sk-wrong", max_retries=0) as client,
        pytest.raises(openai.AuthenticationError) as refused,
    ):
        client.chat.completions.create(model="default", messages=HI, max_tokens=1)
    assert refused.value.status_code == 401
    with (
        anthropic.Anthropic(base_url=served.url, api_key="sk-wrong", max_retries=0) as claude,
        pytest.raises(anthropic.AuthenticationError) as denied,
    ):
        claude.messages.create(model="default", max_tokens=1, messages=HI)
    assert denied.value.status_code == 401
    with (
        ollama.Client(host=served.url, headers={"Authorization": "Bearer sk-wrong"}) as local,
        pytest.raises(ollama.ResponseError) as rejected,
    ):
        local.chat(model="default", messages=HI, options={"num_predict": 1})
    assert rejected.value.status_code == 401
    assert "Invalid API key" in rejected.value.error


def test_a_key_limited_to_one_model_is_refused_another(served: Served) -> None:
    with (
        openai.OpenAI(base_url=f"{served.url}/v1", api_key=NARROW, max_retries=0) as client,
        pytest.raises(openai.PermissionDeniedError) as refused,
    ):
        client.chat.completions.create(model="default", messages=HI, max_tokens=1)
    assert refused.value.status_code == 403
    assert isinstance(refused.value.body, dict) and refused.value.body["type"] == "permission_error"
    assert not [r for r in _records(served.ledger, "narrow", 1) if r.status == 200]


def test_the_third_request_in_a_minute_is_rate_limited_with_retry_after(served: Served) -> None:
    with openai.OpenAI(base_url=f"{served.url}/v1", api_key=SLOW, max_retries=0) as client:
        for _ in range(2):
            client.chat.completions.create(model="default", messages=HI, max_tokens=1)
        with pytest.raises(openai.RateLimitError) as limited:
            client.chat.completions.create(model="default", messages=HI, max_tokens=1)
    assert limited.value.status_code == 429
    assert 1 <= int(limited.value.response.headers["retry-after"]) <= 60
    statuses = sorted(r.status for r in _records(served.ledger, "slow", 3))
    assert statuses == [200, 200, 429]


def test_a_token_budget_still_holds_after_a_restart(tmp_path: Path, serve: Any) -> None:
    config, ledger = _write_config(tmp_path)
    with (
        serve(config, ledger) as first,
        openai.OpenAI(base_url=f"{first.url}/v1", api_key=BUDGET, max_retries=0) as client,
    ):
        reply = client.chat.completions.create(model="default", messages=HI, max_tokens=1)
        assert reply.usage and reply.usage.total_tokens >= 20  # one request spends the whole budget
        _records(first.ledger, "budget", 1)
        with pytest.raises(openai.RateLimitError):
            client.chat.completions.create(model="default", messages=HI, max_tokens=1)
    with serve(config, ledger) as second:
        with (
            openai.OpenAI(base_url=f"{second.url}/v1", api_key=BUDGET, max_retries=0) as client,
            pytest.raises(openai.RateLimitError) as limited,
        ):
            client.chat.completions.create(model="default", messages=HI, max_tokens=1)
        assert "budget" in limited.value.message and "does not renew" in limited.value.message
        assert "retry-after" not in limited.value.response.headers  # a lifetime budget: waiting will not help
        assert limited.value.response.headers["x-should-retry"] == "false"
        # the other keys are not affected
        with openai.OpenAI(base_url=f"{second.url}/v1", api_key=ACCT, max_retries=0) as client:
            assert client.chat.completions.create(model="default", messages=HI, max_tokens=1).choices


def _samples(text: str, name: str, key: str) -> float:
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and sample.labels.get("key") == key
    )


def test_the_ledger_and_metrics_match_what_the_sdks_report(served: Served) -> None:
    reported: dict[str, list[tuple[int, int]]] = {"/chat/completions": [], "/messages": [], "/api/chat": []}
    with openai.OpenAI(base_url=f"{served.url}/v1", api_key=ACCT, max_retries=0) as client:
        reply = client.chat.completions.create(model="default", messages=HI, max_tokens=4, temperature=0)
        assert reply.usage
        reported["/chat/completions"].append((reply.usage.prompt_tokens, reply.usage.completion_tokens))
        stream = client.chat.completions.create(
            model="default",
            messages=[{"role": "user", "content": "Name a colour."}],
            max_tokens=4,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
        usage = [chunk.usage for chunk in stream if chunk.usage]
        assert len(usage) == 1
        reported["/chat/completions"].append((usage[0].prompt_tokens, usage[0].completion_tokens))
    with anthropic.Anthropic(base_url=served.url, api_key=ACCT, max_retries=0) as claude:
        message = claude.messages.create(model="default", max_tokens=4, messages=HI)
        cached = message.usage.cache_read_input_tokens or 0
        reported["/messages"].append((message.usage.input_tokens + cached, message.usage.output_tokens))
    with ollama.Client(host=served.url, headers={"Authorization": f"Bearer {ACCT}"}) as local:
        answer = local.chat(model="default", messages=HI, options={"num_predict": 4})
        reported["/api/chat"].append((answer.prompt_eval_count or 0, answer.eval_count or 0))
    # A client that leaves mid-stream: recorded once, as disconnected.
    long = {"model": "default", "messages": [{"role": "user", "content": "Count to one hundred."}], "stream": True}
    with (
        httpx.Client(timeout=30, headers={"Authorization": f"Bearer {ACCT}"}) as http,
        http.stream("POST", f"{served.url}/v1/chat/completions", json={**long, "max_tokens": 200}) as response,
    ):
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: {"):
                break

    records = _records(served.ledger, "acct", 5)
    time.sleep(0.2)
    records = _records(served.ledger, "acct", 5)
    (left,) = [r for r in records if r.disconnected]
    assert left.endpoint == "/chat/completions" and left.completion_tokens < 200
    finished = [r for r in records if not r.disconnected]
    assert all(r.status == 200 for r in records) and len(finished) == 4
    for endpoint, usages in reported.items():
        mine = [r for r in finished if r.endpoint == endpoint]
        evaluated = endpoint == "/api/chat"  # Ollama counts the prompt tokens it evaluated, not those cached
        recorded = sum(r.prompt_tokens - (r.cached_tokens if evaluated else 0) for r in mine)
        assert recorded == sum(p for p, _ in usages), endpoint
        assert sum(r.completion_tokens for r in mine) == sum(c for _, c in usages), endpoint

    assert httpx.get(f"{served.url}/metrics", headers={"x-api-key": NARROW}).status_code == 403  # a tenant
    page = httpx.get(f"{served.url}/metrics", headers={"x-api-key": ACCT})
    assert page.status_code == 200
    families = {family.name for family in text_string_to_metric_families(page.text)}
    assert {"asgi_llm_requests", "asgi_llm_request_duration_seconds", "asgi_llm_model_loaded"} <= families
    assert _samples(page.text, "asgi_llm_requests_total", "acct") == len(records)
    assert _samples(page.text, "asgi_llm_prompt_tokens_total", "acct") == sum(r.prompt_tokens for r in records)
    assert _samples(page.text, "asgi_llm_completion_tokens_total", "acct") == sum(r.completion_tokens for r in records)
    assert _samples(page.text, "asgi_llm_client_disconnects_total", "acct") == 1
    assert _samples(page.text, "asgi_llm_request_duration_seconds_count", "acct") == len(records)
