"""What a gateway costs: an upstream model behind `asgi-llm serve`, versus the upstream directly.

Why this measures what it measures: two `asgi-llm serve` child processes run in one run. The
upstream serves the packaged default model; the gateway serves the same model as an *upstream*
model (`ASGI_LLM_BASE_URL` set to the upstream, nothing else changed), so every request to it
is parsed, sent on over HTTP, streamed back, re-encoded and accounted. The client (this process,
httpx, one keep-alive connection per side) sends the same streamed chat completion, greedy with
`max_tokens` N, alternately to the upstream and to the gateway, R times each after one warm-up
each, so drift hits both alike and the upstream's prompt cache is equally warm for both.

Time to first token: from sending the request to the first chunk carrying text. Decode rate:
`(tokens - 1) / (last text chunk - first text chunk)`, tokens as the stream's usage reports them,
so prompt processing is excluded. Prints p50 (and p90) TTFT per side and the gateway's added
p50, the median tokens/s per side and their ratio gateway/direct, and checks both sides
produced the same text.

Run: .venv/bin/python benchmarks/gateway_overhead.py [--tokens N] [--repeats R] [--threads T]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx
from _server import cpu_busy, free_port, wait_healthy

MESSAGES = [{"role": "user", "content": "Write a short story about a lighthouse keeper."}]




def serve(env: dict[str, str]) -> tuple[subprocess.Popen[bytes], str]:
    command = shutil.which("asgi-llm", path=str(Path(sys.executable).parent))
    assert command, "asgi-llm is installed in this environment"
    port = free_port()
    args = [command, "serve", "--port", str(port), "--log-level", "warning"]
    process = subprocess.Popen(args, env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    wait_healthy(url, process)
    return process, url


def stream_once(client: httpx.Client, url: str, tokens: int) -> tuple[float, float, str]:
    """Time to first token, decode tokens/s, and the text of one streamed chat completion."""
    body = {
        "model": "default",
        "messages": MESSAGES,
        "max_tokens": tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    sent = time.perf_counter()
    times: list[float] = []
    parts: list[str] = []
    produced = 0
    with client.stream("POST", f"{url}/v1/chat/completions", json=body) as reply:
        reply.raise_for_status()
        for line in reply.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                produced = chunk["usage"]["completion_tokens"]
            for choice in chunk.get("choices") or ():
                if choice["delta"].get("content"):
                    times.append(time.perf_counter())
                    parts.append(choice["delta"]["content"])
    rate = (produced - 1) / (times[-1] - times[0]) if len(times) > 1 else 0.0
    return times[0] - sent, rate, "".join(parts)


def p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="llama.cpp threads of the upstream")
    args = parser.parse_args()
    busy = cpu_busy()
    print(f"CPU busy before start: {busy:.0%}" if busy is not None else "CPU busy before start: unknown")
    if busy is not None and busy > 0.1:
        print("warning: the machine is busy; figures will be noisy")

    upstream, direct = serve({"ASGI_LLM_N_THREADS": str(args.threads), "ASGI_LLM_N_CTX": "1024"})
    gateway = None
    try:
        gateway, via = serve({"ASGI_LLM_BASE_URL": f"{direct}/v1", "ASGI_LLM_UPSTREAM_MODEL": "default"})
        results: dict[str, list[tuple[float, float, str]]] = {"direct": [], "gateway": []}
        with httpx.Client(timeout=120) as to_direct, httpx.Client(timeout=120) as to_gateway:
            sides = {"direct": (to_direct, direct), "gateway": (to_gateway, via)}
            for client, url in sides.values():
                stream_once(client, url, args.tokens)  # warm-up
            for _ in range(args.repeats):
                for name, (client, url) in sides.items():
                    results[name].append(stream_once(client, url, args.tokens))
    finally:
        for process in (gateway, upstream):
            if process is not None:
                process.send_signal(signal.SIGINT)
                process.wait(60)

    print(
        f"{args.repeats} streamed chat completions per side, max_tokens {args.tokens}, upstream threads {args.threads}"
    )
    for name, runs in results.items():
        ttft = [r[0] * 1000 for r in runs]
        rates = [r[1] for r in runs]
        print(
            f"  {name:8s} TTFT p50 {p(ttft, 0.5):7.1f} ms  p90 {p(ttft, 0.9):7.1f} ms   decode {statistics.median(rates):6.1f} tokens/s"
        )
    added = p([r[0] * 1000 for r in results["gateway"]], 0.5) - p([r[0] * 1000 for r in results["direct"]], 0.5)
    ratio = statistics.median(r[1] for r in results["gateway"]) / statistics.median(r[1] for r in results["direct"])
    print(f"gateway: +{added:.1f} ms time to first token (p50), tokens/s ratio gateway/direct {ratio:.3f}")
    texts = {r[2] for runs in results.values() for r in runs}
    if len(texts) != 1:
        print(f"warning: the outputs differ between runs or sides ({len(texts)} distinct texts)")


if __name__ == "__main__":
    main()
