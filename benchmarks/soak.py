"""Soak: minutes of mixed traffic against `asgi-llm serve`, reported every minute, judged at the end.

    .venv/bin/python benchmarks/soak.py [--minutes 30] [--clients 6] [--parallel 4] [--prompt-cache-mib 16]
        [--queue-timeout 30] [--hang-seconds 60] [--conversation-share 0.5] [--threads T] [--seed S]
        [--server-log FILE] [--results FILE]

Starts `asgi-llm serve` (packaged model) on a free port with `parallel` P and a prompt cache of
`--prompt-cache-mib` (16 MiB holds about 700 positions of the packaged model: far less than the
conversations below), then C clients (raw httpx, one connection pool) send requests back to back for
the whole run. Half of the requests (`--conversation-share`) are turns of ten conversations that
share one ~250-token system prompt (a conversation is reset after 3 to 6 turns; the clients take
turns of different conversations at once); the rest are one-off requests, each of a random protocol
(OpenAI chat, completions and Responses, Anthropic messages, Ollama chat), streamed or not, plain, n
of 2 or 3, tools (forced and auto), json_schema output, or a stream the client leaves after a few
chunks. `max_tokens` stays small (8 to 64), so the server turns over many requests a minute on 2
cores.

Every request has a watchdog: no byte for `--hang-seconds` (headers and each body chunk count) makes
it hung, and it is abandoned. Outputs of json_schema requests must parse as JSON objects and forced
tool calls must carry JSON object arguments; others count as invalid outputs. `/health` is polled
every 3 s, the server's RSS read from /proc meanwhile, and `/metrics` and the server's stderr (kept
in `--server-log`) read for failed scheduler steps (the larger of the faults counter and the count
of "a scheduler step failed" log lines), stalls and restarts. One line a minute, then a summary with
pass/fail against the goal: 0 hung, 0 failed steps, and RSS at the end within 5% of RSS after
warm-up (the first 2 minutes or 20% of the run, whichever is shorter). Exits 1 on a fail.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _server import asgi_llm_serve, cpu_busy, free_port, wait_healthy
from _soak_traffic import SYSTEM, Result, Traffic, watched

METRICS = ("faults", "stalls", "restarts")  # asgi_llm_engine_<name>_total
STEP_FAILED = "a scheduler step failed"

# -- what the server says about itself ----------------------------------------------------------


def rss_mb(pid: int) -> float | None:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    found = re.search(r"^VmRSS:\s+(\d+) kB", status, re.MULTILINE)
    return int(found.group(1)) / 1024 if found else None


async def engine_counters(client: httpx.AsyncClient) -> dict[str, float] | None:
    """asgi_llm_engine_{faults,stalls,restarts}_total summed over models; None without them."""
    try:
        text = (await client.get("/metrics", timeout=10)).text
    except httpx.HTTPError:
        return None
    if "asgi_llm_engine_" not in text:
        return None
    counts = dict.fromkeys(METRICS, 0.0)
    for name, value in re.findall(r"^asgi_llm_engine_(\w+?)_total(?:\{[^}]*\})? (\S+)$", text, re.MULTILINE):
        if name in counts:
            counts[name] += float(value)
    return counts


class ServerLog:
    """The server's stderr, in a file: failed steps, and its warning and error lines."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self.step_failures = 0
        self.lines: Counter[str] = Counter()  # WARNING/ERROR lines and exception lines, by text

    def read(self) -> None:
        with self.path.open("rb") as f:
            f.seek(self._offset)
            data = f.read()
        cut = data.rfind(b"\n") + 1
        self._offset += cut
        for line in data[:cut].decode(errors="replace").splitlines():
            self.step_failures += STEP_FAILED in line
            if re.match(r"(WARNING|ERROR|CRITICAL):|\w+(\.\w+)*(Error|Exception)\b", line):
                self.lines[re.sub(r"\d+", "N", line.strip())[:160]] += 1


@dataclass
class Server:
    process: subprocess.Popen[bytes]
    url: str
    log: ServerLog


def start_server(args: argparse.Namespace, folder: Path) -> Server:
    config = folder / "soak.toml"
    options = {"parallel": args.parallel, "prompt_cache_mib": args.prompt_cache_mib,
               "queue_timeout": args.queue_timeout}  # fmt: skip
    config.write_text('[[models]]\naliases = ["default"]\n' + "".join(f"{k} = {v}\n" for k, v in options.items()))
    port = free_port()
    command = asgi_llm_serve("--config", str(config), *(["--threads", str(args.threads)] if args.threads else []))
    log = Path(args.server_log or Path(tempfile.gettempdir()) / f"asgi-llm-soak-{os.getpid()}.log")
    with log.open("wb") as out:
        process = subprocess.Popen(command(port), stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    wait_healthy(url, process, 180)
    return Server(process, url, ServerLog(log))


# -- keeping count ------------------------------------------------------------------------------


@dataclass
class Tally:
    results: list[Result] = field(default_factory=list)
    health_polls: int = 0
    health_bad: Counter[str] = field(default_factory=Counter)
    rss: list[tuple[float, float]] = field(default_factory=list)  # (seconds into the run, MB)
    counters: dict[str, float] | None = None
    server_exit: int | None = None  # the server's exit status, had it ended during the run
    samples: dict[str, str] = field(default_factory=dict)  # first detail seen per outcome and kind

    def add(self, result: Result) -> None:
        self.results.append(result)
        key = f"{result.outcome} {result.kind}"
        if result.outcome not in ("ok", "disconnected") and key not in self.samples:
            self.samples[key] = result.detail

    def failed_steps(self, log: ServerLog) -> int:
        return max(int((self.counters or {}).get("faults", 0)), log.step_failures)


def p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else 0.0


def errors(results: list[Result]) -> Counter[str]:
    return Counter(r.outcome for r in results if r.outcome not in ("ok", "disconnected", "hung"))


def minute_line(minute: float, tally: Tally, window: list[Result], log: ServerLog) -> str:
    served = sum(r.outcome == "ok" for r in tally.results)
    errs = ", ".join(f"{k} ×{n}" for k, n in sorted(errors(tally.results).items())) or "none"
    seconds = [r.seconds for r in window if r.outcome == "ok"]
    counters = tally.counters or {}
    rss = f"{tally.rss[-1][1]:.0f} MB" if tally.rss else "?"
    return (f"[{minute:5.1f} min] served {served} (+{sum(r.outcome == 'ok' for r in window)}), "
            f"left {sum(r.outcome == 'disconnected' for r in tally.results)}, errors: {errs}; "
            f"hung {sum(r.outcome == 'hung' for r in tally.results)}; failed steps {tally.failed_steps(log)}, "
            f"stalls {counters.get('stalls', 0):.0f}, restarts {counters.get('restarts', 0):.0f}; "
            f"/health not 200: {sum(tally.health_bad.values())}; RSS {rss}; "
            f"p50 {p(seconds, 0.5):.2f} s, p99 {p(seconds, 0.99):.2f} s")  # fmt: skip


# -- the run ------------------------------------------------------------------------------------


async def client_loop(client: httpx.AsyncClient, traffic: Traffic, tally: Tally, deadline: float, hang: float) -> None:
    while time.monotonic() < deadline and tally.server_exit is None:
        c, after = traffic.next()
        result = await watched(client, c, hang)
        after(result)
        tally.add(result)


async def monitor(server: Server, tally: Tally, started: float, deadline: float, minute: float) -> None:
    """Polls /health and RSS every 3 s; one line every minute."""
    shown, next_line = 0, started + minute
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        while time.monotonic() < deadline:
            await asyncio.sleep(min(3.0, max(0.0, deadline - time.monotonic())))
            if server.process.poll() is not None:
                tally.server_exit = server.process.returncode
                print(f"the server exited with status {tally.server_exit}", flush=True)
                return
            tally.health_polls += 1
            try:
                answer = await client.get("/health")
                if answer.status_code != 200:
                    tally.health_bad[f"{answer.status_code} {answer.text[:200]}"] += 1
            except httpx.HTTPError as exc:
                tally.health_bad[f"no answer ({type(exc).__name__})"] += 1
            if (mb := rss_mb(server.process.pid)) is not None:
                tally.rss.append((time.monotonic() - started, mb))
            server.log.read()
            if time.monotonic() >= next_line:
                tally.counters = await engine_counters(client)
                minutes = (time.monotonic() - started) / 60
                print(minute_line(minutes, tally, tally.results[shown:], server.log), flush=True)
                shown, next_line = len(tally.results), next_line + minute


async def soak(server: Server, args: argparse.Namespace) -> Tally:
    tally, traffic = Tally(), Traffic(random.Random(args.seed), args.conversation_share)
    started = time.monotonic()
    deadline = started + args.minutes * 60
    limits = httpx.Limits(max_connections=args.clients + 2)
    async with httpx.AsyncClient(base_url=server.url, timeout=httpx.Timeout(None, connect=10), limits=limits) as client:
        await asyncio.gather(
            monitor(server, tally, started, deadline, 60.0),
            *(client_loop(client, traffic, tally, deadline, args.hang_seconds) for _ in range(args.clients)),
        )
        tally.counters = await engine_counters(client)
    server.log.read()
    return tally


def system_tokens(url: str) -> int | None:
    body = {"model": "default", "system": SYSTEM, "messages": [{"role": "user", "content": "Hi"}]}
    try:
        answer = httpx.post(f"{url}/v1/messages/count_tokens", json=body, headers={"anthropic-version": "2023-06-01"})
        return int(answer.json()["input_tokens"])
    except (httpx.HTTPError, KeyError, ValueError):
        return None


# -- the summary --------------------------------------------------------------------------------


def rss_verdict(tally: Tally, warm_up: float) -> tuple[bool, str]:
    after = next((mb for t, mb in tally.rss if t >= warm_up), None)
    if after is None or not tally.rss:
        return False, "RSS: no sample after warm-up"
    end, peak = tally.rss[-1][1], max(mb for _, mb in tally.rss)
    change = end / after - 1
    text = (f"RSS {after:.1f} MB after warm-up ({warm_up / 60:.1f} min), {end:.1f} MB at the end ({change:+.1%}), "
            f"peak {peak:.1f} MB")  # fmt: skip
    return abs(change) <= 0.05, text


def summary(tally: Tally, log: ServerLog, minutes: float, hang: float) -> bool:
    results = tally.results
    counters = tally.counters
    warm_up = min(120.0, 0.2 * minutes * 60)
    rss_ok, rss_text = rss_verdict(tally, warm_up)
    hung = [r for r in results if r.outcome == "hung"]
    steps = tally.failed_steps(log)
    ok = [r for r in results if r.outcome == "ok"]
    print(f"\nsummary after {minutes:g} min:")
    print(f"  requests {len(results)}: served {len(ok)} ({len(ok) / (minutes * 60):.1f}/s), "
          f"left mid-stream on purpose {sum(r.outcome == 'disconnected' for r in results)}, "
          f"hung {len(hung)}, errors {sum(errors(results).values())}")  # fmt: skip
    print("  errors by status: " + (", ".join(f"{k} ×{n}" for k, n in sorted(errors(results).items())) or "none"))
    for key, detail in sorted(tally.samples.items()):
        count = sum(f"{r.outcome} {r.kind}" == key for r in results)
        print(f"    {key} ×{count}: {detail[:240]}")
    print(f"  hung (no byte for {hang:g} s): {len(hung)}" + "".join(f"\n    {r.kind} ({r.detail})" for r in hung[:10]))
    source = "metrics" if counters is not None else "no engine metrics"
    c = counters or {}
    print(f"  failed scheduler steps {steps} (faults {c.get('faults', 0):.0f} from {source}, "
          f"{log.step_failures} '{STEP_FAILED}' log lines); "
          f"stalls {c.get('stalls', 0):.0f}, restarts {c.get('restarts', 0):.0f}")  # fmt: skip
    print(f"  /health polls {tally.health_polls}, not 200: {sum(tally.health_bad.values())}"
          + "".join(f"\n    ×{n} {k}" for k, n in tally.health_bad.most_common(5)))  # fmt: skip
    print(f"  {rss_text}")
    seconds, gaps = [r.seconds for r in ok], [r.longest_gap for r in ok]
    print(f"  latency of served requests p50 {p(seconds, 0.5):.2f} s, p99 {p(seconds, 0.99):.2f} s, "
          f"max {max(seconds, default=0):.2f} s; longest silence within one {max(gaps, default=0):.2f} s")  # fmt: skip
    kinds = Counter(r.kind.split()[0] for r in results)
    print("  by protocol: " + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())))
    noted = f"{sum(log.lines.values())} warning/error lines" if log.lines else "no warnings"
    print(f"  server log {log.path}: {noted}")
    for line, n in log.lines.most_common(8):
        print(f"    ×{n} {line}")
    if tally.server_exit is not None:
        print(f"  the server exited during the run, with status {tally.server_exit}")
    verdicts = [("server up", tally.server_exit is None), ("0 hung", not hung), ("0 failed steps", steps == 0),
                ("RSS within 5%", rss_ok)]  # fmt: skip
    passed = all(v for _, v in verdicts)
    print("  goal: " + ", ".join(f"{name} {'PASS' if v else 'FAIL'}" for name, v in verdicts)
          + f" => {'PASS' if passed else 'FAIL'}")  # fmt: skip
    return passed


def write_results(tally: Tally, path: Path) -> None:
    with path.open("w") as out:
        for r in tally.results:
            row = {"kind": r.kind, "outcome": r.outcome, "seconds": round(r.seconds, 3), "gap": round(r.longest_gap, 3)}
            out.write(json.dumps({**row, "chunks": r.reading.chunks, "detail": r.detail}) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--clients", type=int, default=6)
    parser.add_argument("--parallel", type=int, default=4)
    parser.add_argument("--prompt-cache-mib", type=int, default=16)
    parser.add_argument("--queue-timeout", type=float, default=30, help="below --hang-seconds: queued requests end")
    parser.add_argument("--hang-seconds", type=float, default=60)
    parser.add_argument("--conversation-share", type=float, default=0.5, help="of the requests, turns of conversations")
    parser.add_argument("--threads", type=int, help="llama.cpp threads (default: the setting's)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--server-log", metavar="FILE", help="the server's output (default: a file in the temp folder)")
    parser.add_argument("--results", metavar="FILE", help="every request (kind, outcome, seconds), as JSON Lines")
    args = parser.parse_args()
    busy = cpu_busy()
    print(f"CPU busy before start: {busy:.0%}" if busy is not None else "CPU load unknown")
    with tempfile.TemporaryDirectory() as folder:
        server = start_server(args, Path(folder))
        try:
            print(f"asgi-llm serve at {server.url} (pid {server.process.pid}): parallel {args.parallel}, "
                  f"prompt cache {args.prompt_cache_mib} MiB, queue timeout {args.queue_timeout:g} s; "
                  f"{args.clients} clients for {args.minutes:g} min; system prompt {system_tokens(server.url)} tokens",
                  flush=True)  # fmt: skip
            tally = asyncio.run(soak(server, args))
            passed = summary(tally, server.log, args.minutes, args.hang_seconds)
            if args.results:
                write_results(tally, Path(args.results))
        finally:
            server.process.terminate()
            try:
                server.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                print("the server did not stop within 30 s of SIGTERM; killed")
                server.process.kill()
                server.process.wait()
    sys.exit(0 if passed else 1)


if __name__ == "__main__":
    main()
