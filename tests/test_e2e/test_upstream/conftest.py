"""Real upstream servers for the upstream engine, and gateways in front of them.

Upstreams are separate processes, each on the packaged default model: `asgi-llm serve`, and
llama-cpp-python's own OpenAI-compatible server (`python -m llama_cpp.server`). A gateway is
`asgi-llm serve`'s own app (`standalone_app`: OpenAI and Anthropic at /v1, Ollama at the root)
under real uvicorn in this process, its one model configured as an upstream model.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from asgi_llm import ModelConfig, Settings
from asgi_llm.cli.serve import standalone_app
from asgi_llm.config import default_model_path

from ...test_http.uvicorn_thread import free_port
from ...test_http.uvicorn_thread import uvicorn_serving as run_app

UPSTREAM_MODEL = "SmolLM2-135M-Instruct"
UPSTREAM_CONFIG = """\
usage_jsonl = "{usage}"

[[models]]
aliases = ["default"]
n_ctx = 1024
n_threads = 1
embeddings = true
"""


def wait_until(ready: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        assert time.monotonic() < deadline, f"{what} did not happen in {timeout}s"
        time.sleep(0.1)


def answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=5).status_code == 200
    except httpx.TransportError:
        return False


@dataclass
class Upstream:
    """A running upstream process; `base_url` is its OpenAI base (`.../v1`)."""

    base_url: str
    process: subprocess.Popen[str]
    usage: Path | None = None

    def stop(self) -> str:
        self.process.send_signal(signal.SIGINT)
        output, _ = self.process.communicate(timeout=60)
        return output or ""

    def records(self) -> list[dict[str, Any]]:
        """The upstream's own usage records (asgi-llm only)."""
        assert self.usage is not None
        if not self.usage.exists():
            return []
        return [json.loads(line) for line in self.usage.read_text().splitlines()]


def start_asgi_llm(folder: Path, port: int | None = None) -> Upstream:
    folder.mkdir(parents=True, exist_ok=True)
    usage = folder / "usage.jsonl"
    config = folder / "upstream.toml"
    config.write_text(UPSTREAM_CONFIG.format(usage=usage))
    command = shutil.which("asgi-llm", path=str(Path(sys.executable).parent))
    assert command
    port = port or free_port()
    args = [command, "serve", "--config", str(config), "--port", str(port), "--log-level", "warning"]
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    upstream = Upstream(f"http://127.0.0.1:{port}/v1", process, usage)
    _wait_healthy(upstream, f"http://127.0.0.1:{port}/health")
    return upstream


def start_llama_cpp_server(folder: Path) -> Upstream:
    port = free_port()
    args = [sys.executable, "-m", "llama_cpp.server", "--model", default_model_path(), "--model_alias", "smollm2"]
    args += ["--host", "127.0.0.1", "--port", str(port), "--n_ctx", "1024", "--n_threads", "1", "--verbose", "false"]
    args += ["--interrupt_requests", "false"]  # by default any other request (a health check) cuts a stream short
    with (folder / "llama-cpp-server.log").open("w") as log:  # its load report would fill a pipe
        process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, text=True)
    upstream = Upstream(f"http://127.0.0.1:{port}/v1", process)
    _wait_healthy(upstream, f"{upstream.base_url}/models")
    return upstream


def _wait_healthy(upstream: Upstream, url: str) -> None:
    def ready() -> bool:
        if upstream.process.poll() is not None:
            output = upstream.process.communicate()[0]
            raise AssertionError(f"the upstream exited: {output}")
        return answers(url)

    try:
        wait_until(ready, 90, "the upstream starting")
    except BaseException:
        if upstream.process.poll() is None:
            upstream.process.kill()
            upstream.process.communicate()
        raise


@contextlib.contextmanager
def running(upstream: Upstream) -> Iterator[Upstream]:
    try:
        yield upstream
    finally:
        if upstream.process.poll() is None:
            upstream.stop()


@pytest.fixture(scope="session")
def asgi_llm_upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Upstream]:
    with running(start_asgi_llm(tmp_path_factory.mktemp("upstream"))) as upstream:
        yield upstream


@pytest.fixture(scope="session")
def llama_cpp_upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Upstream]:
    with running(start_llama_cpp_server(tmp_path_factory.mktemp("llama-cpp-server"))) as upstream:
        yield upstream


def run_gateway(settings: Settings) -> contextlib.AbstractContextManager[str]:
    """`asgi-llm serve`'s app on these settings under uvicorn in a thread; yields its root URL."""
    return run_app(standalone_app(settings))


@pytest.fixture(scope="session")
def serve_app() -> Callable[[Any], contextlib.AbstractContextManager[str]]:
    return run_app


@pytest.fixture(scope="session")
def serve_gateway() -> Callable[[Settings], contextlib.AbstractContextManager[str]]:
    return run_gateway


@pytest.fixture(scope="session")
def unused_port() -> Callable[[], int]:
    return free_port


@pytest.fixture(scope="session")
def start_upstream() -> Callable[..., Upstream]:
    """`start_upstream(folder, port=None)`: a new `asgi-llm serve` upstream; the caller stops it."""
    return start_asgi_llm


def gateway_settings(urls: Sequence[str], upstream_model: str, **options: Any) -> Settings:
    """One upstream model, `remote` (alias `default`), on these replicas; `options` for its config."""
    options = {"health_interval": 0.5, "first_byte_timeout": 60.0, **options}
    model = ModelConfig(
        id="remote",
        aliases=("default",),
        base_urls=tuple(urls),
        upstream_model=upstream_model,
        embeddings=True,
        **options,
    )
    return Settings(models=(model,))


@dataclass
class Gateway:
    url: str
    upstream: Upstream
    usage: Path
    model: str  # the upstream's name for the model

    def records(self) -> list[dict[str, Any]]:
        if not self.usage.exists():
            return []
        return [json.loads(line) for line in self.usage.read_text().splitlines()]


@contextlib.contextmanager
def _gateway(upstream: Upstream, name: str, folder: Path) -> Iterator[Gateway]:
    usage = folder / "usage.jsonl"
    settings = gateway_settings([upstream.base_url], name).model_copy(update={"usage_jsonl": str(usage)})
    with run_gateway(settings) as url:
        yield Gateway(url, upstream, usage, name)


@pytest.fixture(scope="session")
def asgi_llm_gateway(asgi_llm_upstream: Upstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    with _gateway(asgi_llm_upstream, UPSTREAM_MODEL, tmp_path_factory.mktemp("gateway")) as gateway:
        yield gateway


@pytest.fixture(scope="session")
def llama_cpp_gateway(llama_cpp_upstream: Upstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    with _gateway(llama_cpp_upstream, "smollm2", tmp_path_factory.mktemp("gateway")) as gateway:
        yield gateway


@pytest.fixture(params=["asgi-llm", "llama-cpp-server"])
def gateway(request: pytest.FixtureRequest) -> Gateway:
    """A gateway in front of each kind of real upstream in turn."""
    name = "asgi_llm_gateway" if request.param == "asgi-llm" else "llama_cpp_gateway"
    found: Gateway = request.getfixturevalue(name)
    return found
