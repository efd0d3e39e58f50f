"""Concurrency-4 load, quiet and with a background process busy on one core, for several thread
counts and OpenMP wait policies: the measurements the default `n_threads` is chosen from.

    .venv/bin/python benchmarks/contention.py [--threads 1,2] [--wait-policy default,passive]
        [--adapt on,off] [--llama-server] [--tokens 64] [--rounds 2] [--concurrency 4]

For each configuration it starts `asgi-llm serve --threads T` (packaged model; the environment's
OMP_WAIT_POLICY set as asked, `default` = unset; `adapt_threads` on or off; with `--llama-server`, also
llama.cpp's own server as anchors.py builds it) and runs rounds alternating quiet and contended
(a `while True: pass` process pinned to the last core this process may use). A round is
`--concurrency` streamed chat completions of `--tokens` tokens each (end-of-turn tokens banned),
started together. Prints, per configuration, aggregate tokens/s and the slowest request's latency
quiet and contended, and the ratios the goal is stated in: contended aggregate / quiet aggregate
(goal >= 0.40) and slowest contended request / median quiet request (goal <= 5).

The machine's other load is not ours to stop: the script prints how busy the CPU was before
it started, and rounds alternate so that drift hits both sides alike.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _server import ChildServer, cpu_busy, free_port, wait_healthy

from asgi_llm.config import default_model_path

USER = [{"role": "user", "content": "Write a very long story about the sea."}]
KEEP_TALKING = {"0": -100, "2": -100}  # the packaged model's end-of-turn tokens


async def one(client: httpx.AsyncClient, tokens: int) -> tuple[float, int]:
    body = {"model": "default", "messages": USER, "max_tokens": tokens, "stream": True,
            "logit_bias": KEEP_TALKING, "stream_options": {"include_usage": True}}  # fmt: skip
    started = time.perf_counter()
    produced = 0
    async with client.stream("POST", "/v1/chat/completions", json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if line.startswith("data: {"):
                usage = json.loads(line[6:]).get("usage")
                if usage:
                    produced = usage["completion_tokens"]
    return time.perf_counter() - started, produced


async def load(url: str, concurrency: int, tokens: int) -> tuple[float, list[float]]:
    """Aggregate tokens/s of one round, and each request's latency."""
    async with httpx.AsyncClient(base_url=url, timeout=600) as client:
        started = time.perf_counter()
        results = await asyncio.gather(*(one(client, tokens) for _ in range(concurrency)))
        wall = time.perf_counter() - started
    return sum(n for _, n in results) / wall, [t for t, _ in results]


def hog(core: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", "while True: pass"],
        preexec_fn=lambda: os.sched_setaffinity(0, {core}),  # noqa: PLW1509 (only sets the child's affinity)
    )


def serve(threads: int, policy: str, adapt: bool, folder: Path) -> tuple[subprocess.Popen[bytes], str]:
    command = shutil.which("asgi-llm", path=str(Path(sys.executable).parent))
    assert command, "asgi-llm is installed beside this Python"
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    env["OMP_WAIT_POLICY"] = "active" if policy == "active" else "passive"
    if policy.startswith("spin"):  # libgomp spins this many times at a barrier, then sleeps (its default: 300000)
        env["GOMP_SPINCOUNT"] = policy[4:]
    argv = [command, "serve", "--port", str(port), "--log-level", "warning", "--threads", str(threads)]
    if not adapt:
        config = folder / "fixed-threads.toml"
        config.write_text('[[models]]\nid = "default"\nadapt_threads = false\n')
        argv += ["--config", str(config)]
    process = subprocess.Popen(argv, env=env)
    url = f"http://127.0.0.1:{port}"
    wait_healthy(url, process)
    return process, url


def llama_server(threads: int, args: argparse.Namespace) -> ChildServer:
    """llama.cpp's own server on the packaged model (built and cached by anchors.py) with `-np` the
    concurrency, in this environment (libgomp's own 3 ms spin unless it sets OpenMP variables)."""
    from anchors import build, theirs

    binary, _ = build(args.cache)
    return theirs(binary, default_model_path(), threads, args.concurrency)


def measure_llama_server(threads: int, args: argparse.Namespace) -> None:
    with llama_server(threads, args) as server:
        rounds(server.url, f"{threads} threads, llama-server", threads, "llama-server", "-", args)


def measure(threads: int, policy: str, adapt: bool, folder: Path, args: argparse.Namespace) -> None:
    process, url = serve(threads, policy, adapt, folder)
    try:
        rounds(url, f"{threads} threads, {policy}, adapt {'on' if adapt else 'off'}", threads, policy,
               "on" if adapt else "off", args)  # fmt: skip
    finally:
        process.terminate()
        process.wait(30)


def rounds(url: str, label: str, threads: int, policy: str, adapt: str, args: argparse.Namespace) -> None:
    """Quiet and contended rounds against a running server, then its line of the table."""
    core = max(os.sched_getaffinity(0))
    quiet_rates: list[float] = []
    quiet_times: list[float] = []
    busy_rates: list[float] = []
    busy_times: list[float] = []
    asyncio.run(load(url, 1, 8))  # warm
    for _ in range(args.rounds):
        rate, times = asyncio.run(load(url, args.concurrency, args.tokens))
        quiet_rates.append(rate)
        quiet_times += times
        background = hog(core)
        try:
            time.sleep(0.3)
            rate, times = asyncio.run(load(url, args.concurrency, args.tokens))
        finally:
            background.kill()
            background.wait()
        busy_rates.append(rate)
        busy_times += times
        print(f"  ({label}: round quiet {quiet_rates[-1]:.1f} t/s, contended {rate:.1f} t/s,"
              f" slowest contended request {max(times):.1f} s)", flush=True)  # fmt: skip
    quiet, busy = statistics.median(quiet_rates), statistics.median(busy_rates)
    typical = statistics.median(quiet_times)
    print(f"{threads:>7} {policy:>8} {adapt:>5} {quiet:>9.1f} {busy:>9.1f} {busy / quiet:>6.2f}"
          f" {max(quiet_times):>9.2f} {max(busy_times):>9.2f} {max(busy_times) / typical:>6.2f}", flush=True)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--wait-policy", default="default,passive")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--adapt", default="on", help="adapt_threads: on, off or on,off")
    parser.add_argument("--llama-server", action="store_true", help="also llama.cpp's own server (see anchors.py)")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "asgi_llm_bench")
    args = parser.parse_args()
    busy = cpu_busy()
    print(f"CPU busy before start: {busy:.0%}" if busy is not None else "CPU load unknown")
    print(f"cores this process may use: {len(os.sched_getaffinity(0))}; concurrency {args.concurrency}, "
          f"{args.tokens} tokens each, {args.rounds} rounds quiet/contended alternating")  # fmt: skip
    print(f"{'threads':>7} {'OMP wait':>8} {'adapt':>5} {'quiet t/s':>9} {'busy t/s':>9} {'ratio':>6}"
          f" {'quiet max':>9} {'busy max':>9} {'x med':>6}")  # fmt: skip
    with tempfile.TemporaryDirectory() as folder:
        for policy in args.wait_policy.split(","):
            for threads in (int(t) for t in args.threads.split(",")):
                for adapt in args.adapt.split(","):
                    measure(threads, policy, adapt == "on", Path(folder), args)
        if args.llama_server:
            for threads in (int(t) for t in args.threads.split(",")):
                measure_llama_server(threads, args)


if __name__ == "__main__":
    main()
