"""The pool's wedges of issue 26, with the real model under uvicorn (on uvloop, as `asgi-llm serve`
runs): a load after an operator's unload, or after an Ollama `keep_alive: 0` request, answers
within the load time and the model stays loaded (it used to load and unload forever, and the load
never answered); and SIGTERM during a load stops `asgi-llm serve` within `load_wait_seconds`
(the endless load used to keep it running until SIGKILL)."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from ..test_http.uvicorn_thread import free_port
from .conftest import Server

LOAD_BOUND = 15.0  # seconds: loading the packaged model takes about one on a shared CPU
LOAD_WAIT = 10.0  # the subprocess server's load_wait_seconds
SUCCESS = {"success": True}
CONFIG = """\
state_path = "{state}"
load_wait_seconds = {wait}

[[models]]
aliases = ["default"]
n_ctx = 512
n_threads = 1
"""


def state(url: str, model: str) -> str:
    listed = httpx.get(f"{url}/admin/models", timeout=10).json()["data"]
    return str(next(m["state"] for m in listed if m["id"] == model))


def until(condition: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return False


def ollama_unload(server: Server, model: str) -> None:
    body = {"model": model, "keep_alive": 0, "stream": False}
    answer = httpx.post(f"{server.url}/api/generate", json=body, timeout=60)
    assert answer.status_code == 200 and answer.json()["done_reason"] == "unload"


def operator_unload(server: Server, model: str) -> None:
    assert httpx.post(f"{server.url}/v1/models/unload", json={"model": model}, timeout=60).json() == SUCCESS


@pytest.mark.parametrize("unload", [operator_unload, ollama_unload], ids=["operator", "ollama-keep-alive-0"])
def test_a_load_after_an_unload_answers_within_the_load_time_and_stays(
    server: Server, unload: Callable[[Server, str], None], caplog: pytest.LogCaptureFixture
) -> None:
    api, model = f"{server.url}/v1", "chat-only"  # the shared server's lazy model: the default serves on
    assert httpx.post(f"{api}/models/load", json={"model": model}, timeout=60).json() == SUCCESS
    unload(server, model)
    assert until(lambda: state(api, model) == "unloaded", 5)
    caplog.set_level(logging.INFO, logger="asgi_llm.pool")
    started = time.monotonic()
    answer = httpx.post(f"{api}/models/load", json={"model": model}, timeout=LOAD_BOUND)
    assert answer.json() == SUCCESS and time.monotonic() - started < LOAD_BOUND
    time.sleep(0.3)  # an idle unload left over from the unload would have fired by now
    assert state(api, model) == "ready"
    loads = [r for r in caplog.records if r.getMessage().startswith(f"model {model} ready in")]
    assert len(loads) == 1, [r.getMessage() for r in caplog.records]


@pytest.mark.model  # `asgi-llm serve` loads the packaged model
def test_sigterm_during_a_load_after_an_unload_stops_serve_within_load_wait_seconds(tmp_path: Path) -> None:
    command = shutil.which("asgi-llm", path=str(Path(sys.executable).parent))
    assert command, "the asgi-llm console script is installed"
    config, log = tmp_path / "asgi-llm.toml", tmp_path / "serve.log"
    config.write_text(CONFIG.format(state=tmp_path / "state.sqlite3", wait=LOAD_WAIT))
    url = f"http://127.0.0.1:{(port := free_port())}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASGI_LLM_")}
    answers: list[httpx.Response | Exception] = []

    def load() -> None:
        try:
            answers.append(httpx.post(f"{url}/models/load", json={"model": "default"}, timeout=LOAD_WAIT + 30))
        except Exception as exc:  # noqa: BLE001 (an answer is what this test waits for; a transport error is one too)
            answers.append(exc)

    with log.open("w") as output:
        process = subprocess.Popen(
            [command, "serve", "--port", str(port), "--config", str(config), "--log-level", "info"],
            stdout=output,
            stderr=subprocess.STDOUT,
            env=env,
        )
    loader = threading.Thread(target=load, daemon=True)
    try:
        up = until(lambda: _healthy(url) or process.poll() is not None, 60)
        assert up and process.poll() is None, log.read_text()
        assert httpx.post(f"{url}/models/unload", json={"model": "default"}, timeout=60).json() == SUCCESS
        loader.start()
        with httpx.Client(base_url=url, timeout=10) as http:
            assert until(lambda: _loading(http), 10), "the load never showed in /health"
        process.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        process.wait(timeout=LOAD_WAIT)  # TimeoutExpired fails the test
        assert time.monotonic() - signalled < LOAD_WAIT
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    loader.join(5)
    printed = log.read_text()
    assert process.returncode in (0, -signal.SIGTERM), printed  # uvicorn re-raises the signal it caught
    assert "Traceback" not in printed
    assert printed.count("ready in") == 2, printed  # at startup, and once for the load: no loop
    assert len(answers) == 1 and isinstance(answers[0], httpx.Response) and answers[0].json() == SUCCESS


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=10).status_code == 200
    except httpx.TransportError:
        return False


def _loading(http: httpx.Client) -> bool:
    return any(m["state"] == "loading" for m in http.get("/health").json()["models"])
