"""The operator's surface of `asgi-llm serve`, tried as an operator would: keys made with
`asgi-llm keys` (before and while the server runs), revoked under it, expired; OpenAI's
rate-limit headers read through the SDK; a spent lifetime budget the SDKs do not retry; and
`--log-json` lines carrying the request id of uvicorn's own access line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import httpx
import httpx2
import openai
import pytest

HI = [{"role": "user", "content": "Say hi."}]
CONFIG = """\
state_path = "{state}"

[[models]]
aliases = ["default"]
n_ctx = 512
n_threads = 1
"""


@dataclass
class Served:
    url: str
    config: Path
    keys: dict[str, str]


def keys_cli(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = shutil.which("asgi-llm", path=str(Path(sys.executable).parent))
    assert command
    return subprocess.run(
        [command, "keys", *args, "--config", str(config)], capture_output=True, text=True, timeout=60, check=False
    )


def create(config: Path, name: str, *options: str) -> str:
    done = keys_cli(config, "create", name, *options)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("ASGI_LLM_")}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, asgi_llm_serve: Any) -> Iterator[Served]:
    folder = tmp_path_factory.mktemp("operator")
    config = folder / "asgi-llm.toml"
    config.write_text(CONFIG.format(state=folder / "state.sqlite3"))
    keys = {
        "team": create(config, "team", "--limit", "requests_per_minute=20", "--limit", "tokens_per_minute=100000"),
        "budget": create(config, "budget", "--limit", "tokens_total=10"),
        "old": create(config, "old", "--expires", "2020-01-01"),
    }
    with asgi_llm_serve("--config", str(config), env=env()) as server:
        yield Served(server.url, config, keys)
    assert not any(key in server.output for key in keys.values())


def openai_client(served: Served, key: str, **options: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{served.url}/v1", api_key=key, **{"max_retries": 0, "timeout": 60, **options})


def test_the_rate_limit_headers_count_down_through_the_sdk(served: Served) -> None:
    with openai_client(served, served.keys["team"]) as sdk:
        first = sdk.chat.completions.with_raw_response.create(model="default", messages=HI, max_tokens=3)
        with sdk.chat.completions.with_streaming_response.create(
            model="default", messages=HI, max_tokens=3, stream=True
        ) as streamed:
            list(streamed.iter_lines())
    used = first.parse().usage
    assert used is not None
    assert first.headers["x-ratelimit-limit-requests"] == streamed.headers["x-ratelimit-limit-requests"] == "20"
    requests = int(first.headers["x-ratelimit-remaining-requests"])
    assert int(streamed.headers["x-ratelimit-remaining-requests"]) == requests - 1
    assert first.headers["x-ratelimit-limit-tokens"] == "100000"
    tokens = int(first.headers["x-ratelimit-remaining-tokens"])
    assert int(streamed.headers["x-ratelimit-remaining-tokens"]) == tokens - used.total_tokens
    assert streamed.headers["x-ratelimit-reset-requests"].endswith("s")
    assert streamed.headers["x-ratelimit-reset-tokens"].endswith("s")


def test_a_spent_lifetime_budget_is_not_retried_by_the_sdks(served: Served) -> None:
    sent: list[str] = []
    hooks = {"request": [lambda request: sent.append(request.url.path)]}
    key = served.keys["budget"]
    with openai_client(served, key) as sdk:
        sdk.chat.completions.create(model="default", messages=HI, max_tokens=3)  # its prompt alone spends it
    with httpx.Client(event_hooks=hooks, timeout=60) as http:
        retrying = openai.OpenAI(base_url=f"{served.url}/v1", api_key=key, max_retries=2, http_client=http)
        with pytest.raises(openai.RateLimitError) as spent:
            retrying.chat.completions.create(model="default", messages=HI, max_tokens=3)
    with httpx2.Client(event_hooks=hooks, timeout=60) as http2:  # the Anthropic SDK's own httpx
        claude = anthropic.Anthropic(base_url=served.url, api_key=key, max_retries=2, http_client=http2)
        with pytest.raises(anthropic.RateLimitError) as spent_too:
            claude.messages.create(model="default", max_tokens=3, messages=HI)  # type: ignore[arg-type]
    assert sent == ["/v1/chat/completions", "/v1/messages"]  # once each: no retry
    assert spent.value.code == "insufficient_quota" and "does not renew" in spent.value.message
    assert "retry-after" not in spent.value.response.headers
    assert spent.value.response.headers["x-ratelimit-remaining-tokens"] == "0"
    assert "does not renew" in spent_too.value.message


def test_an_expired_key_is_refused_saying_so(served: Served) -> None:
    with openai_client(served, served.keys["old"]) as sdk, pytest.raises(openai.AuthenticationError) as expired:
        sdk.models.list()
    assert expired.value.body == {
        "message": "This API key expired at 2020-01-01T00:00:00Z.",
        "type": "authentication_error",
        "param": None,
        "code": "invalid_api_key",
        "request_id": expired.value.request_id,
    }


def test_a_key_made_while_serving_works_at_once_and_stops_when_revoked(served: Served) -> None:
    key = create(served.config, "late", "--operator")
    with openai_client(served, key) as sdk:
        assert [m.id for m in sdk.models.list()] == ["SmolLM2-135M-Instruct"]
        assert httpx.get(f"{served.url}/metrics", headers={"authorization": f"Bearer {key}"}).status_code == 200
        listed = keys_cli(served.config, "list")
        assert listed.returncode == 0 and "late" in listed.stdout and "yes" in listed.stdout
        assert not any(secret in listed.stdout for secret in (key, *served.keys.values()))
        revoked = keys_cli(served.config, "revoke", "late")
        assert revoked.returncode == 0 and revoked.stdout.strip() == "Revoked late."
        with pytest.raises(openai.AuthenticationError) as refused:
            sdk.models.list()
    assert refused.value.status_code == 401 and isinstance(refused.value.body, dict)
    assert refused.value.body["message"] == "Invalid API key."
    with (
        anthropic.Anthropic(base_url=served.url, api_key=key, max_retries=0) as claude,
        pytest.raises(anthropic.AuthenticationError),
    ):
        claude.messages.create(model="default", max_tokens=3, messages=HI)  # type: ignore[arg-type]
    listing = [json.loads(line) for line in keys_cli(served.config, "list", "--json").stdout.splitlines()]
    assert {row["name"]: row["status"] for row in listing} == {
        "budget": "active",
        "late": "revoked",
        "old": "expired",
        "team": "active",
    }


def test_json_logs_carry_the_request_id_of_uvicorns_access_line(tmp_path: Path, asgi_llm_serve: Any) -> None:
    config = tmp_path / "asgi-llm.toml"
    config.write_text("usage_log = true\n" + CONFIG.format(state=tmp_path / "state.sqlite3"))
    with asgi_llm_serve("--config", str(config), "--log-json", "--log-level", "info", env=env()) as server:
        ok = httpx.get(f"{server.url}/v1/models", headers={"x-request-id": "trace-ok"}, timeout=30)
        missing = httpx.post(f"{server.url}/v1/chat/completions", json={"model": "nope", "messages": HI}, timeout=30)
    assert ok.status_code == 200 and missing.status_code == 404
    lines = [json.loads(line) for line in server.output.splitlines() if line.strip()]  # every line is one object
    assert lines and all({"time", "level", "logger", "message", "request_id"} <= set(line) for line in lines)
    assert any(line["logger"] == "uvicorn.error" and "Application startup complete" in line["message"] for line in lines)
    by_id: dict[str | None, list[dict[str, Any]]] = {}
    for line in lines:
        by_id.setdefault(line["request_id"], []).append(line)
    assert {line["logger"] for line in by_id["trace-ok"]} == {"uvicorn.access", "asgi_llm.usage"}
    access = next(line for line in by_id["trace-ok"] if line["logger"] == "uvicorn.access")
    assert "GET /v1/models" in access["message"]
    assert missing.headers["x-request-id"] in by_id
    assert all(line["request_id"] is None for line in lines if "startup" in line["message"])
