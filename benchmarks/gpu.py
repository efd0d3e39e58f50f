"""Many clients on one GPU: `asgi-llm serve` beside llama.cpp's `llama-server` from the same build.

Models: `model` is the packaged GGUF as it is (or `--model`); every other size is a stand-in
written here with gguf-py (`_standin.py`): a llama-architecture GGUF of random F16 weights with the
packaged model's tokenizer and chat template, from the packaged shape (`packaged`, 0.13B) up to
about 1B (`1b`: Llama-3.2-1B's shape, 1.07B, 2 GiB), or any `E,L,H,KV,FF`. Random weights make noise,
which is fine for throughput: each step does a model of that shape's real work.

Per model, both servers run at once with the same model, sequences (`--parallel`, default the most
clients), positions per sequence, offload (`--device gpu`: every layer; `cpu`: none), flash
attention, batch sizes, KV layout (separate streams, or `--kv-unified` on both) and CPU threads.
Rounds alternate the order of the servers. At each client count C (default 1, 16, 64, 128), C
clients of one `httpx.AsyncClient` send R streamed chat completions each (after a warm-up
request), `temperature` 0, `max_tokens` N and every end-of-generation token banned by
`logit_bias`, so each response is N tokens (checked against the usage each server reports).

Figures, per model and C: aggregate tokens/s (the round's completion tokens / its wall time,
median over rounds), time to first token p50 and p95 over every request (request sent to first
content chunk), and the ratios ours / theirs. A markdown table goes to stdout and, with
`--out`, is appended to that file. Without `--llama-server` (or `--build`), ours alone is measured.

Where the time goes, per round and C, for ours: each server thread's CPU per token (the event
loop, the inference thread, llama.cpp's), and the busiest client process's CPU share of its wall
time; a client near one core is measuring itself, so `--client-processes N` splits the clients
over N processes (started together; aggregate = every token / the longest wall time). With
`--switch-interval S`, ours runs with `sys.setswitchinterval(S)`: how long a thread that wants the
GIL waits for the holder (Python's default 0.005 s), between the inference thread and the loop.

Same build on both sides: build llama.cpp once (see README, "GPU") and pass `--build DIR`: the
Python side then loads DIR/bin's libllama (`LLAMA_CPP_LIB_PATH`) and llama-server is
DIR/bin/llama-server. The package need not be installed: with `asgi_llm` on PYTHONPATH, the server
runs as `python -c 'from asgi_llm.cli import main; ...' serve`.

Run: python benchmarks/gpu.py [--sizes model,packaged,1b] [--clients 1,16,64,128] [--tokens N]
     [--requests R] [--rounds K] [--parallel P] [--n-ctx N] [--device gpu|cpu] [--kv-unified]
     [--flash-attn on|off|auto] [--n-batch B] [--n-ubatch U] [--threads T]
     [--build DIR | --llama-server PATH] [--gguf-py DIR] [--work DIR] [--out FILE]
     [--client-processes N] [--switch-interval S] [--ours-only]
Smoke test on a CPU: python benchmarks/gpu.py --device cpu --sizes tiny --clients 1,2 --tokens 8
     --rounds 1 --requests 1 --n-ctx 256
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import functools
import importlib.metadata
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _server import ChildServer, concurrent_streams
from _standin import SHAPES, gguf_module, parse_shape, standin
from anchors import MODEL_ID, Sample, end_token_bias, one_request, p

SERVE = "import sys; from asgi_llm.cli import main; sys.exit(main())"  # `asgi-llm serve`, installed or not


@dataclass
class Figures:
    aggregate: list[float] = field(default_factory=list)  # one per round
    ttft: list[float] = field(default_factory=list)  # every request's, all rounds
    short: int = 0  # responses that were not exactly max_tokens


def ours(model: str, args: argparse.Namespace, folder: Path) -> ChildServer:
    """`asgi-llm serve` with a settings file carrying every option (kv_unified and the batch sizes
    have no command-line flag)."""
    flash = {"on": True, "off": False}.get(args.flash_attn, "auto")
    config = {
        "id": MODEL_ID,
        "path": model,
        "n_ctx": args.n_ctx,
        "parallel": args.parallel,
        "n_threads": args.threads,
        "n_gpu_layers": -1 if args.device == "gpu" else 0,
        "flash_attn": flash,
        "kv_unified": args.kv_unified,
        "n_batch": args.n_batch,
        "n_ubatch": args.n_ubatch,
        "max_queue": max(args.clients),
    }
    settings = {"models": [config], "web_ui": False, "max_pending": 2 * max(args.clients) + args.parallel}
    path = folder / f"serve-{Path(model).stem}.json"
    path.write_text(json.dumps(settings, indent=1))
    switch = "" if args.switch_interval is None else f"sys.setswitchinterval({args.switch_interval}); "
    serve = SERVE.replace("import sys; ", f"import sys; {switch}", 1)
    command = [sys.executable, "-c", serve, "serve", "--config", str(path), "--log-level", "warning"]
    return ChildServer("", {}, command=lambda port: [*command, "--port", str(port)])


def theirs(binary: str, model: str, args: argparse.Namespace) -> ChildServer:
    command = [binary, "-m", model, "--alias", MODEL_ID, "--host", "127.0.0.1", "--no-webui", "--jinja"]
    command += ["-t", str(args.threads), "-tb", str(args.threads), "-c", str(args.n_ctx * args.parallel)]
    command += ["-np", str(args.parallel), "-kvu" if args.kv_unified else "--no-kv-unified", "-fa", args.flash_attn]
    command += ["-ngl", "99" if args.device == "gpu" else "0", "-b", str(args.n_batch), "-ub", str(args.n_ubatch)]
    return ChildServer("", {}, command=lambda port: [*command, "--port", str(port)])


@functools.cache
def _quiet_llama_cpp() -> Any:
    """llama.cpp silent in this process (the servers log as they will); the callback is kept
    alive by the cache, as llama.cpp calls it from then on."""
    import llama_cpp

    callback = llama_cpp.llama_log_callback(lambda level, text, data: None)
    llama_cpp.llama_log_set(callback, None)
    return callback


def quiet_bias(model: str) -> dict[str, float]:
    """`end_token_bias`, without llama.cpp's account of the vocabulary it loads; or the
    `END_BIAS` environment variable's JSON, where loading a vocabulary in this process crashes
    (it did with a CUDA build on an H100: compute it on any CPU host, as the stand-ins share the
    tokenizer of `--model`)."""
    if os.environ.get("END_BIAS"):
        return {str(token): float(bias) for token, bias in json.loads(os.environ["END_BIAS"]).items()}
    _quiet_llama_cpp()
    return end_token_bias(model)


def measure(model: str, args: argparse.Namespace, folder: Path) -> dict[tuple[str, int], Figures]:
    bias = quiet_bias(model)
    sides = {"ours": ours(model, args, folder)}
    if args.llama_server:
        sides["llama-server"] = theirs(args.llama_server, model, args)
    figures = {(side, c): Figures() for side in sides for c in args.clients}
    with contextlib.ExitStack() as running:
        for server in sides.values():
            running.enter_context(server)
        for rnd in range(args.rounds):
            order = list(sides) if rnd % 2 == 0 else list(reversed(sides))
            for clients in args.clients:
                for side in order:
                    server = sides[side].process
                    before = thread_cpu(server.pid) if server is not None else {}
                    rate, samples, client_share = spread(sides[side].url, clients, bias, args)
                    record(figures[side, clients], rate, samples, args.tokens)
                    if server is not None:
                        spent = cpu_per_token(before, thread_cpu(server.pid), sum(s.tokens for s in samples))
                        print(f"  {side} C={clients}: {rate:.0f} tok/s; busiest client process {client_share:.0%}"
                              f" of a core; server CPU µs/token: {spent}", flush=True)  # fmt: skip
            print(f"  round {rnd + 1}/{args.rounds} done", flush=True)
    return figures


def _load_share(url: str, clients: int, bias: dict[str, float], requests: int, tokens: int) -> tuple[Any, ...]:
    """One client process's part: its samples, wall seconds and CPU share of them (warm-up left out)."""
    cpu = [0.0]
    samples, elapsed = asyncio.run(
        concurrent_streams(
            url,
            clients,
            requests,
            lambda client: one_request(client, tokens, bias, 0.0),
            warmed=lambda: cpu.__setitem__(0, time.process_time()),
        )
    )
    return samples, elapsed, (time.process_time() - cpu[0]) / elapsed


def spread(url: str, clients: int, bias: dict[str, float], args: argparse.Namespace) -> tuple[float, list[Any], float]:
    """`clients` over up to `--client-processes` processes: aggregate tokens/s, every sample, and
    the busiest process's CPU share (in this process when there is one)."""
    shares = [
        clients // args.client_processes + (i < clients % args.client_processes) for i in range(args.client_processes)
    ]
    shares = [share for share in shares if share]
    if len(shares) == 1:
        parts = [_load_share(url, clients, bias, args.requests, args.tokens)]
    else:
        with concurrent.futures.ProcessPoolExecutor(len(shares)) as pool:
            futures = [pool.submit(_load_share, url, share, bias, args.requests, args.tokens) for share in shares]
            parts = [future.result() for future in futures]
    samples = [sample for part in parts for sample in part[0]]
    return sum(s.tokens for s in samples) / max(part[1] for part in parts), samples, max(part[2] for part in parts)


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds of each thread of `pid` (Linux /proc), by `name:tid` (the main thread, the
    event loop of ours, named `loop`); empty where unreadable."""
    found = {}
    with contextlib.suppress(OSError):
        for tid in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError, IndexError, ValueError):
                stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
                name = "loop" if tid == str(pid) else Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
                found[f"{name}:{tid}"] = (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")
    return found


def cpu_per_token(before: dict[str, float], after: dict[str, float], tokens: int) -> str:
    """The threads that spent CPU, busiest first, in µs per token."""
    spent = {key: after[key] - before.get(key, 0.0) for key in after}
    busy = sorted((key for key in spent if spent[key] > 0), key=lambda key: -spent[key])[:6]
    return ", ".join(f"{key.split(':')[0]} {1e6 * spent[key] / max(tokens, 1):.0f}" for key in busy) or "unreadable"


def record(figures: Figures, rate: float, samples: list[Sample], tokens: int) -> None:
    figures.aggregate.append(rate)
    figures.ttft.extend(s.ttft for s in samples)
    figures.short += sum(s.tokens != tokens or s.chunks not in (tokens, tokens - 1) for s in samples)


def table(label: str, figures: dict[tuple[str, int], Figures], clients: list[int]) -> list[str]:
    """Markdown rows: tokens/s and TTFT p50 / p95 (ms) ours and theirs, and the ratios."""
    both = ("llama-server", clients[0]) in figures
    rows = []
    for c in clients:
        o = figures["ours", c]
        rate, p50, p95 = statistics.median(o.aggregate), p(o.ttft, 0.5) * 1000, p(o.ttft, 0.95) * 1000
        if not both:
            rows.append(f"| {label} | {c} | {rate:.0f} | | | {p50:.0f} | | {p95:.0f} | |")
            continue
        t = figures["llama-server", c]
        their_rate, t50, t95 = statistics.median(t.aggregate), p(t.ttft, 0.5) * 1000, p(t.ttft, 0.95) * 1000
        rows.append(
            f"| {label} | {c} | {rate:.0f} | {their_rate:.0f} | **{rate / their_rate:.2f}×** "
            f"| {p50:.0f} / {t50:.0f} | {p50 / t50:.2f} | {p95:.0f} / {t95:.0f} | {p95 / t95:.2f} |"
        )
    return rows


HEADER = [
    (
        "| model | clients | ours tok/s | llama-server tok/s | ours / theirs | TTFT p50 ms ours / theirs | ratio "
        "| TTFT p95 ms ours / theirs | ratio |"
    ),
    "|---|---|---|---|---|---|---|---|---|",
]


def models(args: argparse.Namespace, folder: Path) -> list[tuple[str, str]]:
    """(label, GGUF path) of each size asked for, stand-ins written (once) into `folder`."""
    found = []
    for size in args.sizes:
        if size == "model":
            found.append((f"{Path(args.model).stem}", args.model))
            continue
        shape = parse_shape(size)
        path = standin(gguf_module(args.gguf_py), args.model, folder, shape)
        found.append((f"stand-in {size if size in SHAPES else shape.label} F16", str(path)))
    return found


def describe(args: argparse.Namespace) -> str:
    gpu = "none"
    if shutil.which("nvidia-smi"):
        query = ["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"]
        gpu = (
            subprocess.run(query, check=False, capture_output=True, text=True).stdout.strip().replace("\n", "; ")
            or "unknown"
        )
    version = importlib.metadata.version("llama-cpp-python") if _installed("llama-cpp-python") else "not installed"
    return (
        f"GPU: {gpu}; llama-cpp-python {version}, libllama from {os.environ.get('LLAMA_CPP_LIB_PATH', 'its wheel')}; "
        f"device {args.device}, parallel {args.parallel}, n_ctx {args.n_ctx} per sequence, flash attention "
        f"{args.flash_attn}, kv_unified {args.kv_unified}, n_batch {args.n_batch}, n_ubatch {args.n_ubatch}, "
        f"{args.threads} threads, {args.tokens} tokens per response, {args.requests} per client, {args.rounds} rounds"
    )


def _installed(name: str) -> bool:
    try:
        importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog="See benchmarks/README.md.")
    parser.add_argument("--sizes", default="model,packaged,1b", help=f"model, {', '.join(SHAPES)}, or E,L,H,KV,FF")
    parser.add_argument("--clients", default="1,16,64,128", help="client counts, comma-separated")
    parser.add_argument("--tokens", type=int, default=128, help="max_tokens of each response")
    parser.add_argument("--requests", type=int, default=2, help="requests per client per round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--parallel", type=int, default=None, help="sequences, both servers (default: most clients)")
    parser.add_argument("--n-ctx", type=int, default=512, help="positions per sequence, both servers")
    parser.add_argument("--device", choices=["gpu", "cpu"], default="gpu", help="offload every layer, or none")
    parser.add_argument("--kv-unified", action="store_true", help="one KV buffer for all sequences, both servers")
    parser.add_argument("--flash-attn", choices=["on", "off", "auto"], default="on")
    parser.add_argument("--n-batch", type=int, default=2048)
    parser.add_argument("--n-ubatch", type=int, default=512)
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)), help="CPU threads, both")
    parser.add_argument("--build", type=Path, default=None, help="llama.cpp build folder: its bin/ serves both sides")
    parser.add_argument("--llama-server", default=None, help="llama-server binary (default: --build's)")
    parser.add_argument("--model", default=None, help="the GGUF `model` names, and the tokenizer of stand-ins")
    parser.add_argument("--gguf-py", default=None, help="folder holding gguf-py's `gguf` package, if not installed")
    parser.add_argument("--work", type=Path, default=None, help="where stand-ins are kept (default: a temporary one)")
    parser.add_argument("--out", type=Path, default=None, help="also append the table to this file")
    parser.add_argument("--client-processes", type=int, default=1, help="processes the clients are spread over")
    parser.add_argument("--switch-interval", type=float, default=None, help="ours: sys.setswitchinterval(S)")
    parser.add_argument("--ours-only", action="store_true", help="leave llama-server out (--build still builds ours)")
    args = parser.parse_args(argv)
    args.sizes = [s.strip() for s in args.sizes.split(",") if s.strip()]
    args.clients = [int(c) for c in args.clients.split(",")]
    args.parallel = args.parallel or max(args.clients)
    if args.build is not None:
        os.environ["LLAMA_CPP_LIB_PATH"] = str(args.build / "bin")  # this process's llama_cpp and the child's
        args.llama_server = args.llama_server or str(args.build / "bin" / "llama-server")
    if args.ours_only:
        args.llama_server = None
    if args.model is None:
        from asgi_llm.config import default_model_path

        args.model = default_model_path()
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    print(describe(args), flush=True)
    lines = [f"{describe(args)}", "", *HEADER]
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.work or Path(scratch)
        for label, model in models(args, folder):
            print(f"\n== {label}: {Path(model).name}", flush=True)
            figures = measure(model, args, Path(scratch))
            for (side, c), f in figures.items():
                if f.short:
                    print(
                        f"WARNING: {f.short} responses of {side} at C={c} were not {args.tokens} tokens",
                        file=sys.stderr,
                    )
            rows = table(label, figures, args.clients)
            print("\n".join([*HEADER, *rows]), flush=True)
            lines += rows
    if args.out is not None:
        with args.out.open("a", encoding="utf-8") as out:
            out.write("\n".join(lines) + "\n\n")


if __name__ == "__main__":
    main()
