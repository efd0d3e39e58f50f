"""Where a served decode step's time goes, against the same step with nothing but llama.cpp running:
what any server of these kernels could gain at most, and how much of that is ours to take.

    .venv/bin/python benchmarks/step_budget.py [--types model,q4_0,q4_k_m] [--concurrency 8]
        [--requests 2] [--tokens 128] [--threads T] [--llama-server] [--cache DIR]

Per weight type (derived copies as anchors.py makes them, cached in `--cache`):

1. **Bare**: in this process, the C-row step (one token for each of C sequences, laid out as the
   server lays them out) decoded back to back with our own `native` calls, nothing else running;
   the median over three runs of 64 steps.
2. **Served**: `asgi-llm serve` with anchors.py's options, every `llama_decode` timed inside it
   (`_traced_serve.py`), under anchors.py's load at concurrency C (streamed greedy chat
   completions, end tokens banned). Meanwhile the CPU time of each of the server's threads
   (`/proc/PID/task`) and of this client process.

It prints the served C-row step against the bare one (the inflation: CPU that other threads took
from llama.cpp's, each preemption stalling every thread at the next barrier), the gap between
steps (our Python: scheduling, picks, stop checks, hand-off), and the CPU per second of the
event loop (the server's main thread) and of the client. Splitting the inflation between the two
in proportion to their CPU, "ours" is the gap plus the event loop's part, and the bound is how
much faster a step would be if ours were zero. The client's part stays with any server a client
on the same cores talks to, llama.cpp's `llama-server` included. With `--llama-server`, the same
load is also sent to llama.cpp's own server (anchors.py's build and options), and both aggregates
are printed as a fraction of the bare step's rate.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import httpx
from _server import HERE, ChildServer, concurrent_streams
from anchors import (
    MESSAGES,
    N_CTX,
    Sample,
    add_model_arguments,
    build,
    end_token_bias,
    load,
    model_path,
    one_request,
    requantized,
    serve_options,
    theirs,
)


def bare_step_ms(model: str, threads: int, rows: int) -> float:
    """Median milliseconds of a `rows`-sequence, one-token-each decode, llama.cpp alone."""
    from asgi_llm.config import ModelConfig
    from asgi_llm.engines.llamacpp.jobs import BatchToken
    from asgi_llm.engines.llamacpp.native import Decoder, Model, new_context

    config = ModelConfig(path=model, n_threads=threads, n_ctx=N_CTX, flash_attn=True, adapt_threads=False)
    weights = Model(config)
    decoder = Decoder(new_context(weights, config, sequences=rows))
    prompt = weights.tokenize(MESSAGES[0]["content"], add_bos=True)
    for sequence in range(rows):
        decoder.decode([BatchToken(t, i, sequence, i == len(prompt) - 1) for i, t in enumerate(prompt)])
    runs = []
    for _ in range(3):
        started = time.perf_counter()
        for step in range(64):
            position = len(prompt) + step
            decoder.decode([BatchToken(prompt[step % len(prompt)], position, s, True) for s in range(rows)])
        runs.append((time.perf_counter() - started) / 64)
        for sequence in range(rows):
            decoder.forget(sequence, len(prompt))
    decoder.close()
    weights.close()
    return statistics.median(runs) * 1000


def thread_cpu(pid: int) -> dict[int, float]:
    """CPU seconds so far of each thread of `pid`."""
    tick = os.sysconf("SC_CLK_TCK")
    seconds = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except OSError:
            continue  # ended meanwhile
        fields = stat[stat.rindex(")") + 2 :].split()
        seconds[int(tid)] = (int(fields[11]) + int(fields[12])) / tick
    return seconds


def own_cpu() -> float:
    times = os.times()
    return times.user + times.system


def measure(kind: str, model: str, server_bin: Path | None, args: argparse.Namespace) -> None:
    rows = args.concurrency
    bare, bias = bare_step_ms(model, args.threads, rows), end_token_bias(model)
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "steps.json"
        options = serve_options(model, args.threads, max(rows, 1))
        server = ChildServer(
            "",
            {"STEP_TRACE": str(trace)},
            command=lambda port: [sys.executable, str(HERE / "_traced_serve.py"), "serve", "--port", str(port),
                                  "--log-level", "warning", *options],
        )
        with server:
            assert server.process is not None
            pid = server.process.pid
            before: list[Any] = []

            def warmed() -> None:
                before[:] = thread_cpu(pid), own_cpu(), time.monotonic()

            def one(client: httpx.AsyncClient) -> Awaitable[Sample]:
                return one_request(client, args.tokens, bias, 0.0)

            samples, elapsed = asyncio.run(concurrent_streams(server.url, rows, args.requests, one, warmed=warmed))
            cpu_after, client_after, ended = thread_cpu(pid), own_cpu(), time.monotonic()
        cpu_before, client_before, started = before
        aggregate = sum(s.tokens for s in samples) / elapsed
        steps = [(n, at, seconds) for n, at, seconds in json.loads(trace.read_text()) if started <= at <= ended]
    wall = ended - started
    used = {tid: cpu_after[tid] - cpu_before.get(tid, 0.0) for tid in cpu_after}
    loop_cpu = used.get(pid, 0.0) / wall  # the main thread runs the event loop
    llama_cpu = sum(c for tid, c in used.items() if tid != pid) / wall
    client_cpu = (client_after - client_before) / wall
    full = [seconds * 1000 for n, _, seconds in steps if n == rows]
    gaps = [(b[1] - a[1] - a[2]) * 1000 for a, b in itertools.pairwise(steps) if a[0] == rows and b[0] == rows]
    served, gap = statistics.median(full), statistics.median(gaps)
    inflation = served - bare
    ours = gap + inflation * loop_cpu / max(loop_cpu + client_cpu, 1e-9)
    print(f"\n== {kind.upper()}: {Path(model).name}, concurrency {rows}, {len(full)} full steps", flush=True)
    print(f"aggregate {aggregate:.1f} tokens/s over {wall:.1f} s")
    print(f"{rows}-row step: bare {bare:.2f} ms, served {served:.2f} ms (+{inflation / bare:.1%}), gap {gap:.2f} ms")
    print(f"CPU, cores' worth: llama.cpp threads {llama_cpu:.2f}, event loop {loop_cpu:.3f}, client {client_cpu:.3f}")
    print(
        f"ours per step: {ours:.2f} ms of {served + gap:.2f} ({ours / (served + gap):.1%}): "
        f"with none of it, {(served + gap) / (served + gap - ours):.3f}x the steps; "
        f"with nothing but llama.cpp, {(served + gap) / bare:.3f}x"
    )
    ceiling = rows / bare * 1000
    line = f"aggregate / bare step rate ({ceiling:.1f} tokens/s): ours {aggregate / ceiling:.3f}"
    if server_bin is not None:
        with theirs(server_bin, model, args.threads, max(rows, 1)) as other:
            their_aggregate, _ = asyncio.run(load(other.url, rows, args.requests, args.tokens, bias))
        line += f", llama-server {their_aggregate / ceiling:.3f} ({their_aggregate:.1f} tokens/s, run after ours)"
    print(line, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--requests", type=int, default=2, help="requests per client")
    parser.add_argument("--types", default="model", help="as anchors.py: model,q4_0,q4_k_m")
    parser.add_argument("--llama-server", action="store_true", help="also llama-server's aggregate (anchors.py's build)")
    add_model_arguments(parser)
    args = parser.parse_args()
    args.model = model_path(args)
    kinds = args.types.split(",")
    server_bin, quantize = build(args.cache) if args.llama_server or kinds != ["model"] else (None, None)
    for kind in kinds:
        model = args.model if kind == "model" else requantized(quantize, args.model, kind, args.cache)  # type: ignore[arg-type]
        measure(kind, model, server_bin if args.llama_server else None, args)


if __name__ == "__main__":
    main()
