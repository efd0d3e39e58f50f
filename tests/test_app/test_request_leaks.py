"""Two leaks a security pass found, closed: a key sent in a query string reaching `asgi-llm serve`'s
access log (text and JSON), and a refusal sent while the client is still uploading its body,
which a server that closes at once turns into "connection reset" for the client."""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import requests
import uvicorn
from uvicorn.logging import AccessFormatter

from asgi_llm import LLMApp, ModelConfig, ModelPool, Settings
from asgi_llm.adapters.openai import OPENAI
from asgi_llm.engines.fake import FakeEngine
from asgi_llm.http.asgi import Message
from asgi_llm.logs import JSONFormatter, RedactCredentials, redact_query

pytestmark = pytest.mark.anyio

SECRET = "sk-live-4f9a0c1d"

# -- the access log -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "logged"),
    [
        (f"/v1/models?api_key={SECRET}", "/v1/models?api_key=[redacted]"),
        (f"/v1/models?limit=2&key={SECRET}&x=1", "/v1/models?limit=2&key=[redacted]&x=1"),
        (
            f"/a?TOKEN={SECRET}&access_token={SECRET}&sig={SECRET}",
            "/a?TOKEN=[redacted]&access_token=[redacted]&sig=[redacted]",
        ),
        (f"/a?api%5Fkey={SECRET}", "/a?api%5Fkey=[redacted]"),  # the name as the server decodes it
        (f"/v1/models?authorization=Bearer%20{SECRET}", "/v1/models?authorization=[redacted]"),
        (f"/a?Authorization=Bearer+{SECRET}&limit=2", "/a?Authorization=[redacted]&limit=2"),
        (f"/a?h=bearer%20{SECRET}&q=bear", "/a?h=[redacted]&q=bear"),  # a bearer credential, whatever its name
        (f"/a?refresh_token={SECRET}&client_secret={SECRET}", "/a?refresh_token=[redacted]&client_secret=[redacted]"),
        ("/a?keys=1&monkey=2&key", "/a?keys=1&monkey=2&key"),  # other names, and a name with no value
        ("/v1/models", "/v1/models"),
    ],
)
def test_credential_parameters_are_redacted_and_nothing_else(target: str, logged: str) -> None:
    assert redact_query(target) == logged


def access_record(target: str) -> logging.LogRecord:
    """A record as uvicorn's access logger makes it."""
    args = ("127.0.0.1:5000", "GET", target, "1.1", 401)
    return logging.LogRecord("uvicorn.access", logging.INFO, __file__, 1, '%s - "%s %s HTTP/%s" %d', args, None)


@pytest.mark.parametrize("formatter", [JSONFormatter(), AccessFormatter(use_colors=False)], ids=["json", "text"])
def test_the_filter_redacts_before_any_formatter_reads_the_line(formatter: logging.Formatter) -> None:
    record = access_record(f"/v1/models?api_key={SECRET}")
    assert RedactCredentials().filter(record)
    line = formatter.format(record)
    assert SECRET not in line and "/v1/models?api_key=[redacted]" in line


SERVE_CONFIG = f"""\
api_keys = [{{ name = "alice", key = "{SECRET}-real" }}]

[[models]]
id = "remote"
base_url = "http://127.0.0.1:9/v1"
"""


@pytest.fixture(scope="module")
def serve_config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("serve") / "settings.toml"
    path.write_text(SERVE_CONFIG)
    return path


def _port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("log_json", [False, True], ids=["text", "json"])
def test_serve_writes_no_key_from_a_query_string_in_its_access_lines(serve_config: Path, log_json: bool) -> None:
    command = shutil.which("asgi-llm", path=str(Path(sys.executable).parent))
    assert command
    port = _port()
    args = [command, "serve", "--config", str(serve_config), "--port", str(port), "--log-level", "info"]
    process = subprocess.Popen(
        [*args, *(["--log-json"] if log_json else [])], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, process.communicate()[0]
            try:
                httpx.get(f"http://127.0.0.1:{port}/health", timeout=5)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "asgi-llm serve did not start"
                time.sleep(0.1)
        refused = httpx.get(f"http://127.0.0.1:{port}/v1/models", params={"api_key": SECRET, "limit": "2"})
        assert refused.status_code == 401
        queries = [f"{name}={SECRET}" for name in ("key", "token", "access_token", "sig")]
        queries += [
            f"authorization=Bearer%20{SECRET}",
            f"authorization=Bearer+{SECRET}",
        ]  # as a browser's form sends it
        for query in queries:
            assert httpx.get(f"http://127.0.0.1:{port}/v1/models?{query}").status_code == 401
    finally:
        process.send_signal(signal.SIGINT)
        output, _ = process.communicate(timeout=30)
    assert SECRET not in output
    lines = [line for line in output.splitlines() if "/v1/models?" in line]
    assert len(lines) == 7, output
    if log_json:
        first = json.loads(lines[0])
        assert first["logger"] == "uvicorn.access" and "GET /v1/models?api_key=[redacted]&limit=2" in first["message"]
    else:
        assert "GET /v1/models?api_key=[redacted]&limit=2 HTTP/1.1" in lines[0] and "401" in lines[0]
    assert all("=[redacted]" in line for line in lines)


# -- the lingering close ------------------------------------------------------------------------

LIMIT = 1000


def fake_app(**settings: Any) -> LLMApp:
    models = (ModelConfig(id="m", path="unused.gguf"),)
    pool = ModelPool(
        Settings(models=models, max_body_bytes=LIMIT, **settings), engine_factory=lambda c, t: FakeEngine(c, t)
    )
    return LLMApp(pool=pool, adapters=(OPENAI,))


async def upload(
    app: LLMApp, size: int, chunk: int = 100, headers: tuple[tuple[bytes, bytes], ...] = ()
) -> tuple[int, int]:
    """POST a body of `size` bytes declared by Content-Length, `chunk` bytes a message; the
    status answered and the bytes the app read."""
    sent: list[Message] = []
    read = 0

    async def receive() -> Message:
        nonlocal read
        if read >= size:
            await anyio.sleep(3600)  # a client that waits for its answer
        part = min(chunk, size - read)
        read += part
        return {"type": "http.request", "body": b"x" * part, "more_body": read < size}

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/chat/completions",
        "raw_path": b"/chat/completions",
        "root_path": "",
        "query_string": b"",
        "headers": [(b"content-length", str(size).encode()), (b"content-type", b"application/json"), *headers],
        "http_version": "1.1",
        "scheme": "http",
        "server": ("t", 80),
        "client": ("c", 1),
    }
    await app(scope, receive, send)
    return sent[0]["status"], read


async def test_a_413_reads_the_rest_of_the_body_before_the_connection_can_close() -> None:
    assert await upload(fake_app(), 1500) == (413, 1500)


async def test_a_401_reads_the_rest_of_the_body_too() -> None:
    keyed = fake_app(api_keys=({"name": "a", "key": "right"},))
    assert await upload(keyed, 1500, headers=((b"authorization", b"Bearer wrong"),)) == (401, 1500)


async def test_it_reads_no_more_than_twice_the_limit() -> None:
    status, read = await upload(fake_app(), 100_000)
    assert status == 413 and 2 * LIMIT <= read <= 2 * LIMIT + 100


async def test_a_request_read_to_its_end_is_answered_and_done() -> None:
    with anyio.fail_after(5):  # no read past the end of the body: that would wait for the next message
        assert await upload(fake_app(), 50) == (400, 50)  # 50 x's: not JSON


@contextlib.contextmanager
def uvicorn_serving(app: LLMApp) -> Iterator[str]:
    port = _port()
    server = uvicorn.Server(uvicorn.Config(app, port=port, lifespan="on", ws="none", log_level="warning"))
    thread = threading.Thread(target=server.run, name="uvicorn-leaks", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)


@pytest.mark.parametrize("size", [LIMIT * 1024 + 10, 24 * 1024 * 1024], ids=["within-the-bound", "past-it"])
def test_httpx_and_requests_read_the_413_under_uvicorn_and_the_connection_serves_again(size: int) -> None:
    models = (ModelConfig(id="m", path="unused.gguf"),)
    settings = Settings(models=models, max_body_bytes=LIMIT * 1024, api_keys=({"name": "a", "key": "right"},))
    app = LLMApp(pool=ModelPool(settings, engine_factory=lambda c, t: FakeEngine(c, t)), adapters=(OPENAI,))
    body = b'{"model": "m", "messages": [{"role": "user", "content": "' + b"x" * size + b'"}]}'
    keyed = {"authorization": "Bearer right", "content-type": "application/json"}
    with uvicorn_serving(app) as url, httpx.Client(base_url=url, timeout=30) as http, requests.Session() as session:
        refusals = (
            (keyed, 413, "invalid_request_error"),
            ({"content-type": "application/json"}, 401, "authentication_error"),
        )
        for headers, status, kind in refusals:
            answer = http.post("/chat/completions", content=body, headers=headers)
            assert answer.status_code == status and answer.json()["error"]["type"] == kind
            assert http.get("/health").status_code == 200  # the same connection, or a new one: never a reset
            again = session.post(f"{url}/chat/completions", data=body, headers=headers)
            assert again.status_code == status and again.json()["error"]["message"]
