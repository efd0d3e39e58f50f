"""What the limits layer costs per request: counters in this process against counters in Redis.

    .venv/bin/python benchmarks/limits_backend.py [--requests N] [--redis URL]

Drives `LimitsMiddleware` directly (no HTTP, no model) around an app that answers at once, N
requests per variant, interleaved in blocks, and prints p50 / p99 of each request's time with
no layer, with the in-memory `Limiter` and with the Redis gate (one atomic script to enter, one
call to leave), and the layer's cost (variant minus no layer). Without `--redis` it starts a
private `redis-server` on a free loopback port. Like the other benchmarks, run it on an idle
machine: every Redis call is a wake-up of two processes, and the tail grows with other load.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import subprocess
import tempfile
import time
from typing import Any

from _server import cpu_busy, free_port

from asgi_llm.core.policy import Limits
from asgi_llm.middleware.limits import Limiter, LimitsMiddleware, MemoryBudgets
from asgi_llm.shared.guard import Guard
from asgi_llm.shared.redis_limits import RedisLimiter, redis_client

LIMITS = Limits(requests_per_minute=10**9, tokens_per_minute=10**9, max_concurrent=64)


async def answer(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


async def one(app: Any) -> float:
    scope = {"type": "http", "method": "GET", "path": "/x", "root_path": "", "headers": [], "query_string": b""}

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Any) -> None:
        if message["type"] == "http.response.start":
            assert message["status"] == 200, message

    started = time.perf_counter()
    await app(scope, receive, send)
    return time.perf_counter() - started


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(share * len(ordered)), len(ordered) - 1)]


async def measure(requests: int, url: str) -> None:
    gate = RedisLimiter(
        redis_client(url, 2.0), LIMITS, budgets=MemoryBudgets(), guard=Guard("redis", timeout=2.0, fail_open=False)
    )
    variants = {
        "no layer": answer,
        "memory": LimitsMiddleware(answer, limiter=Limiter(LIMITS)),
        "redis": LimitsMiddleware(answer, limiter=gate),
    }
    times: dict[str, list[float]] = {name: [] for name in variants}
    for app in variants.values():  # warm-up: connections, the script cached by Redis
        for _ in range(50):
            await one(app)
    for _ in range(0, requests, 100):
        for name, app in variants.items():
            times[name] += [await one(app) for _ in range(100)]
    await gate.aclose()
    base50, base99 = percentile(times["no layer"], 0.5), percentile(times["no layer"], 0.99)
    print(f"{'variant':10} {'p50 ms':>8} {'p99 ms':>8} {'layer p50':>10} {'layer p99':>10}")
    for name, values in times.items():
        p50, p99 = percentile(values, 0.5), percentile(values, 0.99)
        print(f"{name:10} {p50 * 1e3:8.3f} {p99 * 1e3:8.3f} {(p50 - base50) * 1e3:10.3f} {(p99 - base99) * 1e3:10.3f}")
    print(f"mean redis request: {statistics.mean(times['redis']) * 1e3:.3f} ms over {len(times['redis'])}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--redis", metavar="URL", help="an existing Redis (default: a private one on loopback)")
    args = parser.parse_args()
    busy = cpu_busy()
    print(f"CPU busy before the run: {busy:.0%}" if busy is not None else "CPU load unknown")
    if busy is not None and busy > 0.1:
        print("warning: other work is running; the tail (p99) grows with it")
    if args.redis:
        asyncio.run(measure(args.requests, args.redis))
        return
    command = shutil.which("redis-server")
    if command is None:
        raise SystemExit("redis-server is not installed; give --redis URL")
    port = free_port()
    with tempfile.TemporaryDirectory() as folder:
        server = subprocess.Popen(
            [command, "--port", str(port), "--bind", "127.0.0.1", "--dir", folder, "--save", ""],
            stdout=subprocess.DEVNULL,
        )
        try:
            time.sleep(0.3)
            asyncio.run(measure(args.requests, f"redis://127.0.0.1:{port}/0"))
        finally:
            server.terminate()
            server.wait()


if __name__ == "__main__":
    main()
