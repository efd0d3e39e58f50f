"""Per-request cost of the middleware stack (usage + auth + limits + metrics) over real HTTP.

Why this measures what it measures: the layers run on every request, so their cost is a fixed
per-request overhead. To see it, the model's own cost must be tiny, so the main measurement uses
the scripted `FakeEngine` (two text pieces, no model work). Two uvicorn servers run as child
processes with the same app, settings and engine: one with `LLMApp`'s default middleware built
from settings with an API key, generous limits (per minute, per day, concurrency, so the limiter
and the SQLite budget check both run), a SQLite usage ledger in a temporary folder and `/metrics`;
the other with `middleware=()`. The client (this process, httpx over keep-alive connections)
sends N sequential non-streaming chat completions and N streaming ones (`stream_options:
include_usage`) to each, in alternating blocks so that drift (CPU frequency, other load) hits
both sides alike. Latency is the wall time of one whole request, body read included.

Optionally (`--real N`, default 100; 0 skips) the same against the packaged default model with
max_tokens=8, to put the overhead next to a (small) real generation.

Run: .venv/bin/python benchmarks/middleware_overhead.py [--requests N] [--real N] [--block B]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from _server import cpu_busy, free_port

HERE = Path(__file__).resolve().parent
KEY = "sk-bench-0123456789"
MESSAGES = [{"role": "user", "content": "Say hi."}]


def make_app():  # uvicorn --factory entry point, run in each server child process
    from asgi_llm import LLMApp, ModelPool
    from asgi_llm.config import ApiKeyConfig, LimitsConfig, ModelConfig, Settings
    from asgi_llm.engines.fake import FakeEngine

    with_middleware = os.environ["BENCH_MIDDLEWARE"] == "on"
    real = os.environ["BENCH_ENGINE"] == "real"
    threads = int(os.environ.get("BENCH_THREADS", "1"))  # 1: two idle-but-loaded servers and the client share the cores
    model = (
        ModelConfig(id="bench", aliases=("default",), n_ctx=1024, n_threads=threads)
        if real
        else ModelConfig(id="bench", path="x.gguf")
    )
    options: dict = {}
    if with_middleware:
        generous = LimitsConfig(
            requests_per_minute=1_000_000,
            tokens_per_minute=1_000_000_000,
            max_concurrent=64,
            tokens_per_day=10**12,
        )
        options = {
            "api_keys": (ApiKeyConfig(name="bench", key=KEY),),
            "limits": generous,
            "usage_ledger": os.environ["BENCH_LEDGER"],
        }  # metrics_path defaults to /metrics
    settings = Settings(models=(model,), **options)
    factory = None if real else (lambda config, thread: FakeEngine(config, thread))
    pool = ModelPool(settings, engine_factory=factory) if factory else ModelPool(settings)
    return LLMApp(pool=pool, middleware=None if with_middleware else ())



class Server:
    def __init__(self, engine: str, middleware: bool, folder: str) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.middleware = middleware
        self.ledger = os.path.join(folder, f"ledger-{engine}.sqlite3")
        env = {
            **os.environ,
            "BENCH_ENGINE": engine,
            "BENCH_MIDDLEWARE": "on" if middleware else "off",
            "BENCH_LEDGER": self.ledger,
        }
        command = [sys.executable, "-m", "uvicorn", "--factory", "--app-dir", str(HERE),
                   "middleware_overhead:make_app", "--host", "127.0.0.1", "--port", str(self.port),
                   "--log-level", "warning", "--no-access-log", "--lifespan", "on"]  # fmt: skip
        self.process = subprocess.Popen(command, env=env)
        headers = {"Authorization": f"Bearer {KEY}"} if middleware else {}
        self.client = httpx.Client(base_url=self.base, headers=headers, timeout=httpx.Timeout(120.0))

    def wait_healthy(self, seconds: float = 180) -> None:
        deadline = time.monotonic() + seconds
        while True:
            if self.process.poll() is not None:
                raise SystemExit(f"server exited with status {self.process.returncode}")
            if time.monotonic() > deadline:
                raise SystemExit(f"server did not become healthy within {seconds} s")
            try:
                if self.client.get("/health").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)

    def stop(self) -> None:
        self.client.close()
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def chat_once(client: httpx.Client, max_tokens: int | None) -> tuple[float, int]:
    body: dict = {"model": "bench", "messages": MESSAGES, "temperature": 0}
    if max_tokens:
        body["max_tokens"] = max_tokens
    start = time.perf_counter()
    response = client.post("/chat/completions", json=body)
    elapsed = time.perf_counter() - start
    response.raise_for_status()
    return elapsed, response.json()["usage"]["completion_tokens"]


def stream_once(client: httpx.Client, max_tokens: int | None) -> tuple[float, int]:
    body: dict = {"model": "bench", "messages": MESSAGES, "temperature": 0, "stream": True,
                  "stream_options": {"include_usage": True}}  # fmt: skip
    if max_tokens:
        body["max_tokens"] = max_tokens
    tokens = -1
    start = time.perf_counter()
    with client.stream("POST", "/chat/completions", json=body) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if line.startswith("data: {"):
                chunk = json.loads(line[len("data: ") :])
                if chunk.get("usage"):
                    tokens = chunk["usage"]["completion_tokens"]
    elapsed = time.perf_counter() - start
    return elapsed, tokens


def measure(servers: list[Server], kind: str, n: int, block: int, max_tokens: int | None, warmup: int) -> dict:
    """n requests of `kind` to each server, alternating blocks of `block`; latencies per server."""
    once = chat_once if kind == "chat" else stream_once
    for server in servers:
        for _ in range(warmup):
            once(server.client, max_tokens)
    latencies: dict[bool, list[float]] = {s.middleware: [] for s in servers}
    tokens: dict[bool, set[int]] = {s.middleware: set() for s in servers}
    walls: dict[bool, float] = {s.middleware: 0.0 for s in servers}
    done = 0
    turn = 0
    while done < n:
        size = min(block, n - done)
        order = servers if turn % 2 == 0 else servers[::-1]
        for server in order:
            start = time.perf_counter()
            for _ in range(size):
                elapsed, count = once(server.client, max_tokens)
                latencies[server.middleware].append(elapsed)
                tokens[server.middleware].add(count)
            walls[server.middleware] += time.perf_counter() - start
        done += size
        turn += 1
    return {"latencies": latencies, "tokens": tokens, "walls": walls}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def report(title: str, result: dict) -> None:
    print(f"\n{title}")
    print(f"{'side':<20}{'n':>6}{'req/s':>10}{'mean ms':>10}{'p50 ms':>10}{'p95 ms':>10}   tokens")
    rows = {}
    for middleware in (False, True):
        lat = result["latencies"][middleware]
        rps = len(lat) / result["walls"][middleware]
        mean, p50, p95 = statistics.fmean(lat) * 1e3, percentile(lat, 0.5) * 1e3, percentile(lat, 0.95) * 1e3
        rows[middleware] = (rps, mean, p50, p95)
        name = "with middleware" if middleware else "middleware=()"
        toks = ",".join(str(t) for t in sorted(result["tokens"][middleware]))
        print(f"{name:<20}{len(lat):>6}{rps:>10.1f}{mean:>10.3f}{p50:>10.3f}{p95:>10.3f}   {toks}")
    (r0, m0, p0, _), (r1, m1, p1, _) = rows[False], rows[True]
    print(f"ratio with/without: req/s {r1 / r0:.3f}   mean latency {m1 / m0:.3f}   "
          f"overhead per request: {m1 - m0:+.3f} ms mean, {p1 - p0:+.3f} ms p50")  # fmt: skip


def ledger_rows(path: str) -> int | None:
    import sqlite3

    try:
        with sqlite3.connect(path) as db:
            tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
            for table in tables:
                if "usage" in table or "record" in table:
                    return int(db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])
    except sqlite3.Error:
        return None
    return None



def run(engine: str, n: int, block: int, max_tokens: int | None, folder: str) -> None:
    servers = [Server(engine, False, folder), Server(engine, True, folder)]
    try:
        for server in servers:
            server.wait_healthy()
        refused = httpx.post(f"{servers[1].base}/chat/completions", json={"model": "bench", "messages": MESSAGES})
        assert refused.status_code == 401, f"the middleware side must need the key (got {refused.status_code})"
        label = "FakeEngine" if engine == "fake" else f"default model, max_tokens={max_tokens}"
        warmup = 50 if engine == "fake" else 3
        report(f"[{label}] non-streaming chat", measure(servers, "chat", n, block, max_tokens, warmup))
        report(f"[{label}] streaming chat", measure(servers, "stream", n, block, max_tokens, warmup))
        time.sleep(0.5)  # let the last records land
        metrics = servers[1].client.get("/metrics")
        requests = sum(
            float(line.rsplit(" ", 1)[1])
            for line in metrics.text.splitlines()
            if line.startswith("asgi_llm_requests_total{") and 'key="bench"' in line
        )
        print(
            f"(with-middleware side: {requests:.0f} requests in /metrics, {ledger_rows(servers[1].ledger)} ledger rows)"
        )
    finally:
        for server in servers:
            server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000, help="per side and kind, with the FakeEngine")
    parser.add_argument("--real", type=int, default=100, help="per side and kind, with the default model (0: skip)")
    parser.add_argument("--block", type=int, default=100, help="requests per block before switching sides")
    args = parser.parse_args()
    print(f"cores: {os.cpu_count()}  python: {sys.version.split()[0]}  requests per side and kind: "
          f"{args.requests} (FakeEngine), {args.real} (default model)")  # fmt: skip
    busy = cpu_busy()
    print(f"CPU busy before start: {busy:.0%}" if busy is not None else "CPU busy before start: unknown")
    if busy is not None and busy > 0.1:
        print("WARNING: other processes are using the CPU; absolute numbers will be low", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="asgi-llm-bench-") as folder:
        run("fake", args.requests, args.block, None, folder)
        if args.real:
            run("real", args.real, max(1, min(args.block, args.real // 4)), 8, folder)


if __name__ == "__main__":
    main()
