"""Two leaks a security pass found, closed: a key sent in a query string reaching `asgi-llm serve`'s
access log (text and JSON), and a refusal sent while the client is still uploading its body,
which a server that closes at once turns into "connection reset" for the client."""

from __future__ import annotations

import json
import logging
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import requests
from uvicorn.logging import AccessFormatter

from asgi_llm import LLMApp, ModelConfig, ModelPool, Settings
from asgi_llm.adapters.openai import OPENAI
from asgi_llm.engines.fake import FakeEngine
from asgi_llm.http import linger
from asgi_llm.http.asgi import Message
from asgi_llm.logs import JSONFormatter, RedactCredentials, redact_query

from .uvicorn_thread import free_port, uvicorn_serving

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


@pytest.mark.slow  # it starts `asgi-llm serve`
@pytest.mark.parametrize("log_json", [False, True], ids=["text", "json"])
def test_serve_writes_no_key_from_a_query_string_in_its_access_lines(serve_config: Path, log_json: bool) -> None:
    command = shutil.which("asgi-llm", path=str(Path(sys.executable).parent))
    assert command
    port = free_port()
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
    app: LLMApp,
    size: int,
    chunk: int = 100,
    headers: tuple[tuple[bytes, bytes], ...] = (),
    *,
    sent: list[Message] | None = None,
) -> tuple[int, int]:
    """POST a body of `size` bytes declared by Content-Length, `chunk` bytes a message; the
    status answered and the bytes the app read. `sent` gets each message sent, with `read`:
    the bytes read by then."""
    sent = [] if sent is None else sent
    read = 0

    async def receive() -> Message:
        nonlocal read
        if read >= size:
            await anyio.sleep(3600)  # a client that waits for its answer
        part = min(chunk, size - read)
        read += part
        return {"type": "http.request", "body": b"x" * part, "more_body": read < size}

    async def send(message: Message) -> None:
        sent.append({**message, "read": read})

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


async def test_the_answer_goes_at_once_and_ends_once_the_body_is_read() -> None:
    """A server may close as soon as a response ends (uvicorn does for `Connection: close`),
    and an app can read nothing after it: so the end waits for the body, the bytes do not."""
    sent: list[Message] = []
    assert await upload(fake_app(), 100_000, sent=sent) == (413, 100_000)
    start, answer, end = sent
    assert (start["type"], start["read"], answer["read"], answer["more_body"]) == ("http.response.start", 0, 0, True)
    assert json.loads(answer["body"])["error"]["code"] == "payload_too_large"
    assert end == {"type": "http.response.body", "body": b"", "more_body": False, "read": 100_000}


async def test_it_reads_for_no_more_than_the_linger_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(linger, "LINGER_SECONDS", 0.3)
    sent: list[Message] = []
    started = time.monotonic()
    with anyio.fail_after(5):
        status, read = await upload(fake_app(), 10**15, chunk=1000, sent=sent)  # a body that never ends
    assert status == 413 and 0.3 <= time.monotonic() - started < 3 and read < 10**15
    assert sent[-1]["more_body"] is False  # and the answer ends


async def test_a_request_read_to_its_end_is_answered_and_done() -> None:
    sent: list[Message] = []
    with anyio.fail_after(5):  # no read past the end of the body: that would wait for the next message
        assert await upload(fake_app(), 50, sent=sent) == (400, 50)  # 50 x's: not JSON
    assert [m.get("more_body", False) for m in sent] == [False, False]  # nothing held back


@pytest.mark.slow  # it starts uvicorn
@pytest.mark.parametrize("size", [LIMIT * 1024 + 10, 24 * 1024 * 1024], ids=["just-over", "24-times-over"])
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


def _urllib_post(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
    """The standard library's client, which sends `Connection: close`."""
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


@pytest.mark.slow  # it starts uvicorn
@pytest.mark.parametrize("size", [8 * 1024 * 1024 + 1, 100_000_000], ids=["8MiB+1", "100MB"])
def test_clients_that_close_read_the_refusal_under_uvicorn(size: int) -> None:
    """uvicorn closes at once after a response to `Connection: close`: the answer ends only
    once the body is read, so the connection closes with nothing unread and no reset."""
    models = (ModelConfig(id="m", path="unused.gguf"),)
    settings = Settings(models=models, api_keys=({"name": "a", "key": "right"},))  # max_body_bytes: 8 MiB
    app = LLMApp(pool=ModelPool(settings, engine_factory=lambda c, t: FakeEngine(c, t)), adapters=(OPENAI,))
    body = b"x" * size
    keyed = {"authorization": "Bearer right", "content-type": "application/json"}
    with uvicorn_serving(app) as url:
        target = f"{url}/chat/completions"
        status, answer = _urllib_post(target, body, keyed)
        assert status == 413 and answer["error"]["code"] == "payload_too_large"
        status, answer = _urllib_post(target, body, {"content-type": "application/json"})
        assert status == 401 and answer["error"]["type"] == "authentication_error"
        closing = {**keyed, "connection": "close"}
        again = requests.post(target, data=body, headers=closing, timeout=30)
        assert again.status_code == 413 and again.json()["error"]["code"] == "payload_too_large"
        with httpx.Client(timeout=30) as http:
            once_more = http.post(target, content=body, headers=closing)
        assert once_more.status_code == 413 and once_more.json()["error"]["code"] == "payload_too_large"
