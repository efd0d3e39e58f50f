"""Two real `asgi-llm serve` processes sharing one Redis (limits) and one PostgreSQL (keys, usage,
budgets, stored Responses): limits held across both, revocation, budgets and Responses seen by
both, Redis killed and back, and a killed process's concurrency slot lapsing with its lease.

The tests run in file order on one pair of servers: the last two take Redis and server B down.
"""

from __future__ import annotations

import concurrent.futures
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import anthropic
import httpx
import openai
import pytest

from asgi_llm.core.policy import Limits
from asgi_llm.shared.wiring import database_keys

from .servers import PostgresServer, RedisServer, asgi_llm_cli, free_port

pytestmark = pytest.mark.model  # each `asgi-llm serve` loads the packaged model
LEASE = 2.0
KEYS = {
    "rpm": ["requests_per_minute=5"],  # through the command line
    "conc": ["max_concurrent=2"],
    "gone": [],
    "budget": ["tokens_per_day=12"],
    "plain": [],
    "fault": ["requests_per_minute=1000"],
    "lease": ["max_concurrent=1"],
}


@dataclass
class Server:
    url: str
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])


@dataclass
class Pair:
    a: Server
    b: Server
    keys: dict[str, str]
    config: Path
    redis: RedisServer


def _start(config: Path, log: Path) -> Server:
    port = free_port()
    command = [asgi_llm_cli(), "serve", "--port", str(port), "--config", str(config), "--log-level", "warning"]
    with log.open("wb") as output:  # the child keeps its own copy of the descriptor
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)
    return Server(f"http://127.0.0.1:{port}", process, log)


def _wait_healthy(server: Server) -> None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        assert server.process.poll() is None, server.log.read_text()
        try:
            if httpx.get(f"{server.url}/health", timeout=5).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise AssertionError("server did not become healthy")


def _keys_cli(config: Path, *args: str) -> str:
    done = subprocess.run(
        [asgi_llm_cli(), "keys", *args, "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.fixture(scope="module")
def pair(
    redis_server: RedisServer, postgres_server: PostgresServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Pair]:
    folder = tmp_path_factory.mktemp("pair")
    config = folder / "asgi-llm.toml"
    config.write_text(
        f'limits_url = "{redis_server.url}"\nstate_url = "{postgres_server.url}"\n'
        f"lease_seconds = {LEASE}\nbackend_timeout = 1.0\nweb_ui = false\n"
        '[[models]]\naliases = ["default"]\nn_ctx = 512\nn_threads = 1\nparallel = 2\n',
        encoding="utf-8",
    )
    # made before the servers start, so they see a database holding keys; one through `asgi-llm keys`
    keys = {"rpm": _keys_cli(config, "create", "rpm", "--limit", "requests_per_minute=5")}
    made = database_keys(postgres_server.url, 5.0)
    for name, limits in KEYS.items():
        if name not in keys:
            keys[name] = made.create(name, limits=Limits(**{n: int(v) for n, v in (x.split("=") for x in limits)}))
    a, b = _start(config, folder / "a.log"), _start(config, folder / "b.log")
    try:
        _wait_healthy(a)
        _wait_healthy(b)
        yield Pair(a, b, keys, config, redis_server)
    finally:
        for server in (a, b):
            if server.process.poll() is None:
                server.process.send_signal(signal.SIGINT)
                server.process.wait(timeout=30)
        output = a.log.read_text()
        assert a.process.returncode == 0 and "Traceback" not in output, output


def _openai(server: Server, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=key, max_retries=0, timeout=30)


def _models(server: Server, key: str) -> httpx.Response:
    return httpx.get(f"{server.url}/v1/models", headers={"authorization": f"Bearer {key}"}, timeout=30)


def _hold_slot(server: Server, key: str) -> socket.socket:
    """A request admitted by the limits layer whose body never comes: it holds its slot until the
    socket closes (the layers run before the endpoint reads the body)."""
    sock = socket.create_connection(("127.0.0.1", server.port))
    sock.sendall(
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        + f"authorization: Bearer {key}\r\ncontent-length: 1000\r\n\r\n{{".encode()
    )
    return sock


def _eventually(check: object, timeout: float) -> float:
    """Seconds until `check()` is true; fails after `timeout`."""
    started = time.monotonic()
    while not check():  # type: ignore[operator]
        assert time.monotonic() - started < timeout, "not within the time allowed"
        time.sleep(0.05)
    return time.monotonic() - started


def test_requests_per_minute_admit_exactly_five_of_twelve_spread_over_both(pair: Pair) -> None:
    servers = [pair.a, pair.b] * 6
    with concurrent.futures.ThreadPoolExecutor(12) as pool:
        answers = list(pool.map(lambda server: _models(server, pair.keys["rpm"]), servers))
    assert sorted(r.status_code for r in answers) == [200] * 5 + [429] * 7
    refused = next(r for r in answers if r.status_code == 429)
    assert refused.json()["error"]["code"] == "rate_limit_exceeded" and "5 requests per minute" in refused.text
    assert int(refused.headers["retry-after"]) >= 1 and refused.headers["x-ratelimit-remaining-requests"] == "0"


def test_max_concurrent_holds_across_both(pair: Pair) -> None:
    key = pair.keys["conc"]
    held = [_hold_slot(pair.a, key), _hold_slot(pair.b, key)]
    try:
        assert _eventually(lambda: _models(pair.a, key).status_code == 429, 5) < 5  # both slots taken
        claude = anthropic.Anthropic(base_url=pair.b.url, api_key=key, max_retries=0)
        with claude, pytest.raises(anthropic.RateLimitError) as refused:
            claude.messages.create(model="default", max_tokens=4, messages=[{"role": "user", "content": "Hi"}])
        assert refused.value.body["error"]["type"] == "rate_limit_error"  # type: ignore[index]
        assert "limit 2" in refused.value.body["error"]["message"]  # type: ignore[index]
    finally:
        held[0].close()
    assert _eventually(lambda: _models(pair.b, key).status_code == 200, 5) < 5  # one slot free again
    held[1].close()


def test_a_key_revoked_is_refused_by_every_process_within_a_second(pair: Pair) -> None:
    key = pair.keys["gone"]
    assert _models(pair.a, key).status_code == 200 and _models(pair.b, key).status_code == 200
    assert _keys_cli(pair.config, "revoke", "gone") == "Revoked gone."
    assert _eventually(lambda: _models(pair.b, key).status_code == 401, 1.0) < 1.0
    with _openai(pair.a, key) as client, pytest.raises(openai.AuthenticationError) as refused:
        client.models.list()
    assert refused.value.body["code"] == "invalid_api_key"  # type: ignore[index]


def test_a_daily_token_budget_is_spent_across_both(pair: Pair) -> None:
    key = pair.keys["budget"]
    with _openai(pair.a, key) as a, _openai(pair.b, key) as b:
        first = a.completions.with_raw_response.create(model="default", prompt="The sky is", max_tokens=4)
        used = first.parse().usage
        assert used is not None and 0 < used.total_tokens < 12
        second = b.completions.with_raw_response.create(model="default", prompt="The sky is", max_tokens=4)
        assert second.headers["x-ratelimit-remaining-tokens"] == str(12 - used.total_tokens)  # B saw A's spend
        for client in (a, b):
            with pytest.raises(openai.RateLimitError) as refused:
                client.completions.create(model="default", prompt="The sky is", max_tokens=4)
            assert "12 tokens per day is spent" in refused.value.message


def test_a_response_stored_by_one_is_retrieved_and_continued_through_the_other(pair: Pair) -> None:
    key = pair.keys["plain"]
    with _openai(pair.a, key) as a, _openai(pair.b, key) as b:
        stored = a.responses.create(model="default", input="My name is Ada.", max_output_tokens=8)
        assert b.responses.retrieve(stored.id).output_text == stored.output_text
        follow = b.responses.create(
            model="default", input="What is my name?", previous_response_id=stored.id, max_output_tokens=8
        )
        assert follow.previous_response_id == stored.id and follow.usage is not None
        assert follow.usage.input_tokens > stored.usage.input_tokens  # type: ignore[union-attr]  # the turn before came along
        assert a.responses.retrieve(follow.id).id == follow.id
        b.responses.delete(stored.id)
        with pytest.raises(openai.NotFoundError):
            a.responses.retrieve(stored.id)


def test_redis_killed_gives_503s_and_recovers_when_it_returns(pair: Pair) -> None:
    key = pair.keys["fault"]
    assert _models(pair.a, key).status_code == 200
    pair.redis.stop()
    try:
        started = time.monotonic()
        with _openai(pair.a, key) as client, pytest.raises(openai.InternalServerError) as refused:
            client.models.list()
        assert time.monotonic() - started < 3  # bounded by backend_timeout
        assert refused.value.status_code == 503 and refused.value.body["code"] == "service_unavailable"  # type: ignore[index]
        assert "rate-limit store is unreachable" in refused.value.message and "redis://" not in refused.value.message
        claude = anthropic.Anthropic(base_url=pair.b.url, api_key=key, max_retries=0)
        with claude, pytest.raises(anthropic.APIStatusError) as envelope:
            claude.messages.create(model="default", max_tokens=4, messages=[{"role": "user", "content": "Hi"}])
        assert envelope.value.status_code == 503
        assert envelope.value.body["type"] == "error" and envelope.value.body["error"]["type"] == "overloaded_error"  # type: ignore[index]
    finally:
        pair.redis.start()
    for server in (pair.a, pair.b):
        assert _eventually(lambda: _models(server, key).status_code == 200, 5) < 5  # noqa: B023


def test_a_killed_process_does_not_keep_its_slot_past_the_lease(pair: Pair) -> None:
    key = pair.keys["lease"]
    sock = _hold_slot(pair.b, key)
    try:
        assert _eventually(lambda: _models(pair.a, key).status_code == 429, 5) < 5
        pair.b.process.send_signal(signal.SIGKILL)
        pair.b.process.wait(timeout=10)
        assert _models(pair.a, key).status_code == 429  # the dead process's lease holds for now
        assert _eventually(lambda: _models(pair.a, key).status_code == 200, LEASE + 2) <= LEASE + 2
    finally:
        sock.close()
    assert os.path.exists(pair.a.log)
