"""What an 8 MB prompt costs the server: time to its refusal, extra RSS, and the latency of normal
requests while eight such prompts arrive at once, over and over.

    .venv/bin/python benchmarks/hostile_prompts.py [--size BYTES] [--hostile N] [--normal R] [--threads T]

Starts `asgi-llm serve` (packaged model) in a child process. Per protocol it sends one prompt of
`--size` characters (default 8,000,000: under the 8 MiB body limit) and prints the time to the
400 and the server's peak RSS over its RSS before (VmHWM after resetting it through
/proc/PID/clear_refs). Then it times `--normal` chat completions (16 tokens) quiet and while
`--hostile` clients (default 8) keep sending the huge prompt, interleaved in rounds, and prints
p50 / max latency of each and the ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _server import ChildServer, asgi_llm_serve, cpu_busy

MODEL = "default"
ANTHROPIC = {"anthropic-version": "2023-06-01"}


def bodies(prompt: str) -> dict[str, tuple[str, bytes, dict[str, str]]]:
    user = [{"role": "user", "content": prompt}]
    cases: dict[str, tuple[str, dict[str, Any], dict[str, str]]] = {
        "openai chat": ("/v1/chat/completions", {"model": MODEL, "messages": user, "max_tokens": 16}, {}),
        "openai completions": ("/v1/completions", {"model": MODEL, "prompt": prompt, "max_tokens": 16}, {}),
        "openai embeddings": ("/v1/embeddings", {"model": MODEL, "input": prompt}, {}),
        "openai responses": ("/v1/responses", {"model": MODEL, "input": prompt, "max_output_tokens": 16}, {}),
        "anthropic messages": ("/v1/messages", {"model": MODEL, "messages": user, "max_tokens": 16}, ANTHROPIC),
        "ollama chat": ("/api/chat", {"model": MODEL, "messages": user, "stream": False}, {}),
        "ollama embed": ("/api/embed", {"model": MODEL, "input": prompt, "truncate": False}, {}),
    }
    return {name: (path, json.dumps(body).encode(), headers) for name, (path, body, headers) in cases.items()}


def rss(pid: int, field: str) -> int:
    """kB of VmRSS / VmHWM."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(field)


async def post(client: httpx.AsyncClient, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, float]:
    started = time.perf_counter()
    response = await client.post(path, content=body, headers={"content-type": "application/json", **headers})
    return response.status_code, time.perf_counter() - started


async def refusals(client: httpx.AsyncClient, pid: int, cases: dict[str, tuple[str, bytes, dict[str, str]]]) -> None:
    print(f"{'protocol':<20} {'status':>6} {'seconds':>8} {'extra RSS MB':>13}")
    for name, (path, body, headers) in cases.items():
        before = rss(pid, "VmRSS")
        Path(f"/proc/{pid}/clear_refs").write_text("5")  # resets VmHWM to the current RSS
        status, seconds = await post(client, path, body, headers)
        print(f"{name:<20} {status:>6} {seconds:>8.3f} {(rss(pid, 'VmHWM') - before) / 1024:>13.1f}")


async def normal(client: httpx.AsyncClient, n: int) -> list[float]:
    user = [{"role": "user", "content": "Name three colours."}]
    body = json.dumps({"model": MODEL, "messages": user, "max_tokens": 16, "temperature": 0}).encode()
    latencies = []
    for _ in range(n):
        status, seconds = await post(client, "/v1/chat/completions", body, {})
        assert status == 200, status
        latencies.append(seconds)
    return latencies


def attack(url: str, hostile: int, size: int, stop: Any, sent: Any) -> None:
    """In a process of its own (so that sending 8 MB bodies does not slow the measuring client):
    `hostile` clients, each sending the huge chat prompt again as soon as it is refused."""

    async def attacker(client: httpx.AsyncClient, path: str, body: bytes, headers: dict[str, str]) -> None:
        while not stop.is_set():
            status, _ = await post(client, path, body, headers)
            assert status == 400, status
            with sent.get_lock():
                sent.value += 1

    async def main() -> None:
        case = bodies(("lorem ipsum dolor sit amet " * (size // 27 + 1))[:size])["openai chat"]
        async with httpx.AsyncClient(base_url=url, timeout=120, limits=httpx.Limits(max_connections=hostile)) as client:
            await asyncio.gather(*(attacker(client, *case) for _ in range(hostile)))

    asyncio.run(main())


async def under_attack(client: httpx.AsyncClient, n: int, hostile: int, size: int) -> tuple[list[float], int]:
    stop, sent = multiprocessing.Event(), multiprocessing.Value("i", 0)
    process = multiprocessing.Process(target=attack, args=(str(client.base_url), hostile, size, stop, sent))
    process.start()
    while sent.value < hostile:  # the attack is under way
        await asyncio.sleep(0.05)
    latencies = await normal(client, n)
    stop.set()
    process.join()
    return latencies, int(sent.value)


async def run(args: argparse.Namespace, url: str, pid: int) -> None:
    cases = bodies(("lorem ipsum dolor sit amet " * (args.size // 27 + 1))[: args.size])
    limits = httpx.Limits(max_connections=args.hostile + 4)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as client:
        await normal(client, 2)  # warm
        print(f"server RSS after warm-up {rss(pid, 'VmRSS') / 1024:.0f} MB")
        await refusals(client, pid, cases)
        quiet: list[float] = []
        loud: list[float] = []
        sent = 0
        for _ in range(args.rounds):  # interleaved: drift and other load hit both alike
            quiet += await normal(client, args.normal)
            more, n = await under_attack(client, args.normal, args.hostile, args.size)
            loud += more
            sent += n
        print(f"\nnormal chat completions (16 tokens), {len(quiet)} each, {args.rounds} interleaved rounds:")
        print(f"  quiet:                      p50 {statistics.median(quiet):.3f} s  max {max(quiet):.3f} s")
        print(f"  {args.hostile} clients sending 8 MB: p50 {statistics.median(loud):.3f} s  max {max(loud):.3f} s"
              f"  ({sent} hostile prompts refused meanwhile)")  # fmt: skip
        print(f"  ratio p50 {statistics.median(loud) / statistics.median(quiet):.2f}x,"
              f"  max {max(loud) / max(quiet):.2f}x")  # fmt: skip
        print(f"  server RSS now {rss(pid, 'VmRSS') / 1024:.0f} MB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=8_000_000)
    parser.add_argument("--hostile", type=int, default=8)
    parser.add_argument("--normal", type=int, default=5, help="normal requests per round and side")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, help="llama.cpp threads (default: the setting's)")
    args = parser.parse_args()
    busy = cpu_busy()
    print(f"CPU busy before start: {busy:.0%}" if busy is not None else "CPU load unknown")
    threads = ["--threads", str(args.threads)] if args.threads else []
    with ChildServer("", {}, command=asgi_llm_serve(*threads)) as server:
        assert server.process is not None
        asyncio.run(run(args, server.url, server.process.pid))


if __name__ == "__main__":
    main()
