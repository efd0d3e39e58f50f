"""What the HTTP benchmarks share: a uvicorn child process serving an app factory, and a CPU check."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Self, TypeVar

import httpx

HERE = Path(__file__).resolve().parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cpu_busy(seconds: float = 1.0) -> float | None:
    """Fraction of all cores busy over `seconds` (Linux /proc/stat), before anything of ours runs."""

    def sample() -> tuple[int, int]:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        return sum(fields), fields[3] + fields[4]

    try:
        total, idle = sample()
        time.sleep(seconds)
        total2, idle2 = sample()
    except OSError:
        return None
    return 1 - (idle2 - idle) / max(total2 - total, 1)


T = TypeVar("T")


def shared_pool_limits(clients: int) -> httpx.Limits:
    """Limits for one `httpx.AsyncClient` shared by `clients` concurrent clients: a connection
    each, and none kept alive between requests (every request opens its own, as against
    llama-server, which closes a connection after each stream).

    Why not keep-alive: httpcore 1.0's pool (`AsyncConnectionPool._assign_requests_to_connections`,
    httpcore/_async/connection_pool.py) hands every queued request the first idle connection
    (`available_connections[0]`), which stays IDLE, so still "available", until the request's
    task runs and marks it ACTIVE. When many streams end in the same decode step and their
    clients send again at once, they all take the same connection; all but one raise
    `ConnectionNotAvailable` in `AsyncHTTP11Connection.handle_async_request` and go round the
    pool again, and each pass costs O(connections x queued requests), with a poll() of every
    idle socket (`has_expired`). The client's event loop spent 4.6 s in those passes
    (1,000-1,200 retries) at 128 clients against `asgi-llm serve` on the tiny stand-in, and the
    second requests left the client 0.5-5.6 s late: a cluster of 5 s TTFTs that was the client's.
    (`httpx.Limits(max_connections=N)` alone keeps every idle connection: the default
    `max_keepalive_connections=20` applies only to `httpx.Limits()` left out.) encode/httpcore
    #822 and #1035; httpcore2, which httpx2 and the openai SDK 3 use, reserves an assigned idle
    connection and does not churn."""
    return httpx.Limits(max_connections=clients, max_keepalive_connections=0)


async def concurrent_streams(
    base: str,
    concurrency: int,
    requests: int,
    one: Callable[[httpx.AsyncClient], Awaitable[T]],
    timeout: float = 600,
    warmed: Callable[[], None] = lambda: None,
) -> tuple[list[T], float]:
    """`concurrency` clients sharing one connection pool (no keep-alive: `shared_pool_limits`)
    send `requests` requests (`one`) each, after one warm-up request (prompt cache), whose end
    `warmed` is told of: every result, and the seconds the clients took together."""
    async with httpx.AsyncClient(base_url=base, timeout=timeout, limits=shared_pool_limits(concurrency)) as client:
        await one(client)
        warmed()

        async def worker() -> list[T]:
            return [await one(client) for _ in range(requests)]

        started = time.perf_counter()
        results = await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    return [r for rs in results for r in rs], elapsed


def wait_healthy(url: str, process: subprocess.Popen[Any], timeout: float = 120, health: str = "/health") -> None:
    """Until `url` + `health` answers 200; exits if the server process ends or `timeout` passes first."""
    deadline = time.monotonic() + timeout
    with httpx.Client(base_url=url, timeout=10) as client:
        while True:
            if process.poll() is not None:
                raise SystemExit(f"server exited with status {process.returncode}")
            if time.monotonic() > deadline:
                raise SystemExit(f"server did not become healthy within {timeout:.0f} s")
            try:
                if client.get(health).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)


def asgi_llm_serve(*options: str) -> Callable[[int], list[str]]:
    """`ChildServer`'s `command` for `asgi-llm serve` (the one installed beside this Python)."""
    command = shutil.which("asgi-llm", path=str(Path(sys.executable).parent))
    assert command, "asgi-llm is installed beside this Python"
    return lambda port: [command, "serve", "--port", str(port), "--log-level", "warning", *options]


class ChildServer:
    """`uvicorn --factory module:function` in a child process, ready once `/health` answers 200.
    With `command` (a function of the port), that command instead, e.g. another server binary.
    Environment variables starting with any of `unset` are not passed on."""

    def __init__(
        self,
        factory: str,
        env: dict[str, str],
        *,
        health: str = "/health",
        command: Callable[[int], list[str]] | None = None,
        unset: tuple[str, ...] = (),
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._command = [sys.executable, "-m", "uvicorn", "--factory", "--app-dir", str(HERE), factory,
                         "--host", "127.0.0.1", "--port", str(self.port), "--log-level", "warning"]  # fmt: skip
        if command is not None:
            self._command = command(self.port)
        inherited = {key: value for key, value in os.environ.items() if not (unset and key.startswith(unset))}
        self._env = {**inherited, **env}
        self._health = health
        self.process: subprocess.Popen[bytes] | None = None
        self._output = subprocess.DEVNULL if command is not None else None  # a C++ server logs every request

    def __enter__(self) -> Self:
        self.process = subprocess.Popen(self._command, env=self._env, stdout=self._output, stderr=self._output)
        wait_healthy(self.url, self.process, 180, self._health)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.process is not None
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
