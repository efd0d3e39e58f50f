"""One real model, one real uvicorn server, shared by every end-to-end test.

The host is a small Starlette app with its own routes and the LLM app mounted at
`/v1`, the way users deploy it; the standalone CLI app is served beside it.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Mount, Route

from asgi_llm import LLMApp, ModelConfig, ModelPool, Settings
from asgi_llm.adapters.anthropic import ANTHROPIC
from asgi_llm.adapters.ollama import OLLAMA
from asgi_llm.adapters.openai import OPENAI
from asgi_llm.engines.llamacpp.native import Decoder, Model, new_single_context

from ..test_http.uvicorn_thread import free_port
from ..test_http.uvicorn_thread import uvicorn_serving as run_uvicorn

MODEL = "SmolLM2-135M-Instruct"
N_CTX = 2048


def e2e_settings() -> Settings:
    return Settings(
        models=(
            # One thread: llama.cpp's threads wait for each other at every step, so when the
            # cores are shared (the test process itself, other jobs) two threads run up to ten
            # times slower than one.
            ModelConfig(id=MODEL, aliases=("default",), n_ctx=N_CTX, embeddings=True, n_threads=1),
            ModelConfig(id="chat-only", n_ctx=512, load="lazy"),
        ),
        max_body_bytes=256 * 1024,
    )


async def home(request: Request) -> PlainTextResponse:
    return PlainTextResponse("host home")


async def hello(request: Request) -> JSONResponse:
    return JSONResponse({"hello": request.path_params["name"]})


def host_app(api: LLMApp, ollama: LLMApp) -> Starlette:
    """OpenAI and Anthropic routes at /v1, Ollama's at the root, one shared pool."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with api.lifespan(), ollama.lifespan():
            await api.pool.wait_ready()
            yield

    return Starlette(
        routes=[Route("/home", home), Route("/hello/{name}", hello), Mount("/v1", app=api), Mount("/", app=ollama)],
        lifespan=lifespan,
    )


@dataclass
class Server:
    url: str
    pool: ModelPool


@pytest.fixture(scope="session")
def server() -> Iterator[Server]:
    pool = ModelPool(e2e_settings())
    api = LLMApp(pool=pool, adapters=(OPENAI, ANTHROPIC))
    ollama = LLMApp(pool=pool, adapters=(OLLAMA,), health_path=None)
    with run_uvicorn(host_app(api, ollama)) as url:
        yield Server(url=url, pool=pool)


@pytest.fixture(scope="session")
def serve_host() -> Callable[[LLMApp, LLMApp], contextlib.AbstractContextManager[str]]:
    """Serve two apps as `server` does (the first at /v1, the second at the root), for tests
    that need settings of their own; yields the base URL."""
    return lambda api, ollama: run_uvicorn(host_app(api, ollama))


@pytest.fixture(scope="session")
def client(server: Server) -> Iterator[openai.OpenAI]:

    with openai.OpenAI(base_url=f"{server.url}/v1", api_key="not-checked", max_retries=0, timeout=60) as sdk:
        yield sdk


@dataclass
class CLIServer:
    """A running `asgi-llm serve`; `output` holds what it printed once it has stopped."""

    url: str
    pid: int
    output: str = ""


@contextlib.contextmanager
def _asgi_llm_serve(*args: str, env: dict[str, str] | None = None) -> Iterator[CLIServer]:
    command = shutil.which("asgi-llm", path=str(Path(sys.executable).parent))
    assert command, "the asgi-llm console script is installed"
    port = free_port()
    process = subprocess.Popen(
        [command, "serve", "--port", str(port), "--log-level", "warning", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    served = CLIServer(f"http://127.0.0.1:{port}", process.pid)
    deadline = time.monotonic() + 60
    try:
        while True:
            assert process.poll() is None, process.stdout.read() if process.stdout else ""
            try:
                if httpx.get(f"{served.url}/health", timeout=10).status_code == 200:  # public: no key needed
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "server did not become healthy"
            time.sleep(0.1)
        yield served
    finally:
        process.send_signal(signal.SIGINT)
        served.output, _ = process.communicate(timeout=30)
    assert process.returncode == 0, served.output
    assert "Traceback" not in served.output


@pytest.fixture(scope="session")
def asgi_llm_serve() -> Callable[..., contextlib.AbstractContextManager[CLIServer]]:
    """Start `asgi-llm serve ARGS...` on a free port; it stops (cleanly, or the test fails) on exit."""
    return _asgi_llm_serve


@pytest.fixture(scope="session")
def serve_app() -> Callable[[Starlette], contextlib.AbstractContextManager[str]]:
    """Serve another host app under real uvicorn on a free port; build it on `server.pool` so
    that no model loads twice."""
    return run_uvicorn


@pytest.fixture(scope="module")
def loaded() -> Iterator[tuple[Model, Decoder]]:
    """The packaged model and a one-sequence context of 256 positions, for a module's tests of
    what the engine's pieces do with real logits (no scheduler, no server)."""
    config = ModelConfig(n_ctx=256)
    model = Model(config)
    decoder = Decoder(new_single_context(model, config, size=256, batch=64))
    yield model, decoder
    decoder.close()
    model.close()
