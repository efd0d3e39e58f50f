"""Time to first token for a cold model, a warm one, and one that first evicts another.

    .venv/bin/python benchmarks/residency.py [--repeats R] [--model PATH] [--threads T]

A uvicorn child process serves two lazy entries of the same GGUF (`a`, `b`) under
`max_loaded_models = 1`. Each round streams one chat completion (max_tokens 1) and times the
request until its first content chunk:
  cold   - a when nothing is loaded (after an admin unload of everything),
  warm   - a again, loaded,
  evict  - b while a is loaded and idle: a unloads first, then b loads.
Prints the median and min of R rounds for each.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import httpx
from _server import ChildServer, cpu_busy


def app():  # type: ignore[no-untyped-def]
    """The uvicorn factory run in the child process."""
    from asgi_llm import LLMApp, ModelConfig, ModelPool, Settings

    path, threads = os.environ.get("BENCH_MODEL") or None, int(os.environ["BENCH_THREADS"])
    models = tuple(
        ModelConfig(id=name, path=path, load="lazy", n_ctx=1024, parallel=1, n_threads=threads) for name in "ab"
    )
    return LLMApp(pool=ModelPool(Settings(models=models, max_loaded_models=1)))


def first_token(client: httpx.Client, model: str) -> float:
    body = {"model": model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1, "stream": True}
    started = time.perf_counter()
    with client.stream("POST", "/chat/completions", json=body) as reply:
        reply.raise_for_status()
        for line in reply.iter_lines():
            if line.startswith("data: {") and json.loads(line[6:])["choices"][0]["delta"].get("content") is not None:
                return time.perf_counter() - started
    raise SystemExit("no token came back")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--model", default="")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    busy = cpu_busy()
    if busy is not None and busy > 0.1:
        print(f"warning: the CPU was {busy:.0%} busy before the run")
    times: dict[str, list[float]] = {"cold": [], "warm": [], "evict": []}
    env = {"BENCH_MODEL": args.model, "BENCH_THREADS": str(args.threads)}
    with ChildServer("residency:app", env) as server, httpx.Client(base_url=server.url, timeout=120) as client:
        for _ in range(args.repeats):
            for name in "ab":
                client.post("/models/unload", json={"model": name}).raise_for_status()
            time.sleep(0.2)  # let the unloads finish
            times["cold"].append(first_token(client, "a"))
            times["warm"].append(first_token(client, "a"))
            times["evict"].append(first_token(client, "b"))
    for case, values in times.items():
        print(f"{case:6s} median {statistics.median(values) * 1000:8.1f} ms   min {min(values) * 1000:8.1f} ms")


if __name__ == "__main__":
    main()
