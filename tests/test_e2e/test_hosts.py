"""Every example host app under real uvicorn, serving the real default model.

Each example runs in its own process, started as its docstring says (`uvicorn --app-dir DIR
module:app`, through `uvicorn.run` so the process can report its threads after shutdown).
The official `openai` SDK streams through the mount while the host's own pages answer; the
`ollama` and `anthropic` SDKs work where their clients look; shutdown ends the inference thread.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import anthropic
import httpx
import ollama
import openai
import pytest

from ..test_http.uvicorn_thread import free_port

pytestmark = pytest.mark.model
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
HI = [{"role": "user", "content": "Say hello."}]

# What `uvicorn --app-dir DIR TARGET --port PORT` does, then the threads still alive after shutdown.
# `-P`: the working directory (the repository root) must not shadow the installed package.
RUNNER = """
import sys, threading, uvicorn
app_dir, target, port = sys.argv[1:]
uvicorn.run(target, app_dir=app_dir, port=int(port), log_level="info")
print("threads after shutdown:", ",".join(sorted(t.name for t in threading.enumerate())), flush=True)
"""


NOT_FOUND = ("/api/no-such-page", 404, "Not Found")  # the host's own 404 beside Ollama's /api/*
OWN_API = ("/api/status", 200, "the host's own /api route")  # the host's own route under /api


@dataclass(frozen=True)
class Host:
    name: str
    app_dir: Path
    target: str
    pages: tuple[tuple[str, int, str], ...]  # the host's own: path, status, text in the body


HOSTS = [
    Host("starlette", EXAMPLES, "starlette_app:app", (("/", 200, "Hello from Starlette"), OWN_API, NOT_FOUND)),
    Host(
        "fastapi",
        EXAMPLES,
        "fastapi_app:app",
        (
            ("/", 200, "from FastAPI"),
            ("/openapi.json", 200, "openapi"),
            OWN_API,
            (NOT_FOUND[0], 404, '{"detail":"Not Found"}'),
        ),
    ),
    Host("litestar", EXAMPLES, "litestar_app:app", (("/", 200, "from Litestar"), OWN_API, NOT_FOUND)),
    Host(
        "django",
        EXAMPLES / "django_project",
        "mysite.asgi:application",
        (
            ("/", 200, "Hello from Django"),
            OWN_API,
            ("/admin/login/", 200, "Django administration"),
            ("/admin/", 302, ""),
            ("/static/admin/css/base.css", 200, "body"),
            (NOT_FOUND[0], 404, "Page not found at /api/no-such-page"),  # Django's own (DEBUG) 404 page
        ),
    ),
]


@dataclass(frozen=True)
class Served:
    host: Host
    url: str


def _wait_healthy(url: str, process: subprocess.Popen[str], log: Path) -> None:
    deadline = time.monotonic() + 60
    while True:
        assert process.poll() is None, log.read_text()
        try:
            if httpx.get(f"{url}/v1/health", timeout=5).status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, "the example did not become healthy:\n" + log.read_text()
        time.sleep(0.05)


@pytest.fixture(scope="module", params=HOSTS, ids=[h.name for h in HOSTS])
def served(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    host: Host = request.param
    port = free_port()
    log = tmp_path_factory.mktemp(host.name) / "server.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ASGI_LLM", "DJANGO_"))}
    with log.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "-P", "-c", RUNNER, str(host.app_dir), host.target, str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            text=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, process, log)
        yield Served(host, url)
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=30)
    output = log.read_text()
    assert process.returncode == 0, output
    assert "Traceback" not in output and "ERROR" not in output, output
    assert "lifespan was not forwarded" not in output, output  # the models loaded at startup
    for line in ("Uvicorn running on", "Application startup complete.", "Application shutdown complete."):
        assert line in output, output  # the host's own log lines, even while the model loaded
    (threads,) = [line for line in output.splitlines() if line.startswith("threads after shutdown:")]
    assert "asgi-llm-inference" not in threads, threads


def test_the_host_pages_answer_while_a_completion_streams(served: Served) -> None:
    with openai.OpenAI(base_url=f"{served.url}/v1", api_key="unused", max_retries=0, timeout=60) as client:
        stream = client.chat.completions.create(
            model="default",
            messages=HI,  # type: ignore[arg-type]
            max_tokens=8,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = iter(stream)
        pieces = [next(c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content)]
        for path, status, text in served.host.pages:  # the stream is open, its model mid-generation
            page = httpx.get(served.url + path, timeout=10)
            assert (page.status_code, text in page.text) == (status, True), (path, page.text[:200])
        rest = list(chunks)
    pieces += [c.choices[0].delta.content or "" for c in rest if c.choices]
    assert "".join(pieces).strip()
    assert [c.choices[0].finish_reason for c in rest if c.choices and c.choices[0].finish_reason] in (
        ["length"],
        ["stop"],
    )
    usage = rest[-1].usage
    assert usage is not None and 0 < usage.completion_tokens <= 8


def test_the_ollama_client_at_the_root(served: Served) -> None:
    client = ollama.Client(host=served.url, timeout=60)
    try:
        assert [m.model for m in client.list().models] == ["SmolLM2-135M-Instruct:latest"]
        reply = client.chat(model="default", messages=HI, options={"temperature": 0, "num_predict": 8})
        assert reply.message.content and 0 < (reply.eval_count or 0) <= 8
    finally:
        client.close()


def test_the_anthropic_sdk_at_the_root(served: Served) -> None:
    with anthropic.Anthropic(base_url=served.url, api_key="unused", max_retries=0, timeout=60) as client:
        reply = client.messages.create(model="default", max_tokens=8, messages=HI)  # type: ignore[arg-type]
    assert reply.content[0].type == "text" and reply.content[0].text
    assert 0 < reply.usage.output_tokens <= 8


@pytest.mark.parametrize("served", [HOSTS[1]], ids=["fastapi"], indirect=True)
def test_a_host_route_streams_the_model_in_process(served: Served) -> None:
    """The FastAPI example's own `/summarize` uses `llm.client(key="site")`: no HTTP inside, the
    words reach its client as they are made, and usage counts them under the host's name."""
    text = "The sea is large and blue. Ships sail on it every day, carrying goods between ports."
    chunks: list[bytes] = []
    with httpx.stream("GET", f"{served.url}/summarize", params={"text": text}, timeout=60) as reply:
        assert reply.status_code == 200 and reply.headers["content-type"].startswith("text/plain")
        chunks.extend(reply.iter_raw())
    assert len(chunks) >= 3 and b"".join(chunks).decode().strip()  # token by token, not one buffered body
    metrics = httpx.get(f"{served.url}/v1/metrics", timeout=10).text
    counted = [
        line
        for line in metrics.splitlines()
        if line.startswith("asgi_llm_requests_total{") and 'protocol="in_process"' in line and 'key="site"' in line
    ]
    assert len(counted) == 1 and 'status="200"' in counted[0] and counted[0].endswith(" 1"), counted
