"""A host app with the model mounted: its own route's latency and the model's speed, per thread count.

    .venv/bin/python benchmarks/mounted_host.py [--threads 1,2] [--rounds 2] [--tokens 128]

A uvicorn child process serves a Starlette host: its own `GET /ping` (a 200-item JSON list, the
kind of work a host's routes do) and `LLMApp` mounted at `/v1` with the packaged model (n_ctx
1024, 4 sequences) on T threads, `adapt_threads` on. As a mounted app's process would, it starts
with no OpenMP settings in its environment (libgomp's own wait policy). A client pings `/ping`
every 20 ms for 3 s quiet, then while 8 streamed chat completions of `--tokens` tokens run at
concurrency 4, and prints per T: the completions' aggregate tokens/s and the ping latency p50/p99,
quiet and loaded. The client shares the cores too, as a host's own clients on the same machine
would. Rounds alternate the thread counts' order.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from typing import Any

import httpx
from _server import ChildServer, cpu_busy
from anchors import end_token_bias, one_request, p


def host_app() -> Any:  # uvicorn --factory entry point, run in the server child process
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Mount, Route

    from asgi_llm import LLMApp
    from asgi_llm.config import ModelConfig, Settings

    model = ModelConfig(id="bench", n_ctx=1024, parallel=4, n_threads=int(os.environ["BENCH_THREADS"]))
    llm = LLMApp(Settings(models=(model,)))

    async def ping(request: Request) -> JSONResponse:
        return JSONResponse({"items": [{"i": i, "name": f"item {i}", "tags": ["a", "b"]} for i in range(200)]})

    return Starlette(routes=[Route("/ping", ping), Mount("/v1", llm)])


async def measure(url: str, tokens: int, bias: dict[str, float]) -> dict[str, float]:
    async with httpx.AsyncClient(base_url=url, timeout=600) as client:
        for _ in range(120):  # the pool starts on the first request (no lifespan through a mount)
            try:
                await one_request(client, 8, bias, 0.0)
                break
            except httpx.HTTPStatusError:
                await asyncio.sleep(1)

        async def pings(latencies: list[float], until: asyncio.Event) -> None:
            while not until.is_set():
                started = time.perf_counter()
                (await client.get("/ping")).raise_for_status()
                latencies.append(time.perf_counter() - started)
                await asyncio.sleep(0.02)

        quiet: list[float] = []
        done = asyncio.Event()
        pinging = asyncio.ensure_future(pings(quiet, done))
        await asyncio.sleep(3)
        done.set()
        await pinging
        loaded: list[float] = []
        done = asyncio.Event()
        pinging = asyncio.ensure_future(pings(loaded, done))
        started = time.perf_counter()
        for _ in range(2):
            await asyncio.gather(*(one_request(client, tokens, bias, 0.0) for _ in range(4)))
        elapsed = time.perf_counter() - started
        done.set()
        await pinging
    return {
        "tokens/s": 8 * tokens / elapsed,
        "quiet p50": p(quiet, 0.5),
        "quiet p99": p(quiet, 0.99),
        "loaded p50": p(loaded, 0.5),
        "loaded p99": p(loaded, 0.99),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", default="1,2", help="thread counts to compare")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=128)
    args = parser.parse_args()
    from asgi_llm.config import default_model_path

    bias = end_token_bias(default_model_path())
    counts = [int(t) for t in args.threads.split(",")]
    busy = cpu_busy()
    print(f"cores: {os.cpu_count()}  CPU busy before start: {busy:.0%}" if busy is not None else "", flush=True)
    figures: dict[int, list[dict[str, float]]] = {t: [] for t in counts}
    for rnd in range(args.rounds):
        for threads in counts if rnd % 2 == 0 else list(reversed(counts)):
            env = {"BENCH_THREADS": str(threads)}
            with ChildServer("mounted_host:host_app", env, health="/ping", unset=("OMP_", "GOMP_")) as server:
                figures[threads].append(asyncio.run(measure(server.url, args.tokens, bias)))
    print(f"{'threads':>8}{'tokens/s':>10}{'ping quiet p50/p99 ms':>24}{'ping loaded p50/p99 ms':>25}")
    for threads, rounds in figures.items():
        med = {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
        print(
            f"{threads:>8}{med['tokens/s']:>10.1f}{med['quiet p50'] * 1000:>13.1f} / {med['quiet p99'] * 1000:<8.1f}"
            f"{med['loaded p50'] * 1000:>14.1f} / {med['loaded p99'] * 1000:<8.1f}"
        )


if __name__ == "__main__":
    main()
