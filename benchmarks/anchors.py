"""`asgi-llm serve` against llama.cpp's own C++ `llama-server`, side by side, over the same HTTP client.

The C++ server is built once from the llama.cpp that the installed llama-cpp-python vendors (its sdist,
fetched with `pip download` into the cache folder), with the CMake flags our README gives for
llama-cpp-python itself, so both sides run the same kernels. The binary (and `llama-quantize`, used to
derive the Q4_K_M and Q4_0 copies of the model) is cached under `--cache` (default
~/.cache/asgi_llm_bench).

Per weight type, both servers run at once (an idle server costs nothing) with the same model, thread
count, per-sequence context and number of parallel sequences, and an in-process llama-cpp-python `Llama`
stays loaded in this process. Rounds interleave the sides (the order alternates each round), so the drift
of a shared machine hits all alike. In each round and at each concurrency C (1, 4, 8), C clients of one
`httpx.AsyncClient` send streaming OpenAI chat completions back to back (R requests each, after one
warm-up request), with the same messages, `temperature` 0, `max_tokens` N and every end-of-generation
token banned by `logit_bias`, so every response is exactly N tokens (the script checks the usage both
servers report, and warns if not). With `--temperature T` (T > 0) the requests sample instead, each
server by its own rules for a request that names no other parameter: the whole vocabulary for
`asgi-llm serve` (OpenAI's meaning), llama-server's default chain (top_k 40 first) for it; the
in-process reference stays greedy.

Figures: aggregate tokens/s (completion tokens of the round / its wall time), the median per-stream
decode rate `(chunks - 1) / (last chunk - first chunk)`, time to first token p50/p95 (request sent to
first content chunk), each the median over rounds; ratios ours / theirs per concurrency; and at C = 1
the in-process `create_chat_completion(stream=True)` (same messages and bias) as the ceiling for one
stream.

Run: .venv/bin/python benchmarks/anchors.py [--types model,q4_k_m,q4_0] [--rounds R] [--requests N]
     [--tokens T] [--threads T] [--parallel P] [--temperature T] [--cache DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib.metadata
import json
import os
import statistics
import subprocess
import sys
import tarfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
from _server import ChildServer, asgi_llm_serve, concurrent_streams, cpu_busy

T = TypeVar("T")
MESSAGES = [{"role": "user", "content": "Write a long story about a lighthouse keeper."}]
MODEL_ID = "bench"
CONCURRENCY = (1, 4, 8)
CMAKE_FLAGS = ["-DGGML_NATIVE=OFF", "-DGGML_AVX2=ON", "-DGGML_FMA=ON", "-DGGML_F16C=ON"]  # as README's build
BUILD_ONLY = [
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DCMAKE_BUILD_TYPE=Release",
]
N_CTX = 1024  # positions per sequence, both sides


def build(cache: Path) -> tuple[Path, Path]:
    """`llama-server` and `llama-quantize` built from the vendored llama.cpp of the installed
    llama-cpp-python (cached per version)."""
    version = importlib.metadata.version("llama-cpp-python")
    build_dir = cache / f"build-{version}"
    server, quantize = build_dir / "bin" / "llama-server", build_dir / "bin" / "llama-quantize"
    if server.exists() and quantize.exists():
        return server, quantize
    cache.mkdir(parents=True, exist_ok=True)
    sdist = cache / f"llama_cpp_python-{version}.tar.gz"
    if not sdist.exists():
        print(f"fetching the llama-cpp-python {version} sdist ...", flush=True)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--no-binary",
                ":all:",
                f"llama-cpp-python=={version}",
                "-d",
                str(cache),
            ],
            check=True,
        )
    source = cache / f"llama_cpp_python-{version}" / "vendor" / "llama.cpp"
    if not source.exists():
        with tarfile.open(sdist) as archive:
            archive.extractall(cache, filter="data")
    print(f"building llama-server from {source} (several minutes) ...", flush=True)
    subprocess.run(["cmake", "-S", str(source), "-B", str(build_dir), *CMAKE_FLAGS, *BUILD_ONLY], check=True)
    jobs = str(min(2, os.cpu_count() or 1))
    subprocess.run(
        ["cmake", "--build", str(build_dir), "-j", jobs, "--target", "llama-server", "llama-quantize"], check=True
    )
    return server, quantize


def requantized(quantize: Path, model: str, kind: str, cache: Path) -> str:
    """A copy of `model` in weight type `kind` (llama.cpp's `llama-quantize`), cached."""
    target = cache / f"{Path(model).stem}.{kind}.gguf"
    if not target.exists():
        partial = target.with_suffix(".partial")
        subprocess.run(
            [str(quantize), "--allow-requantize", model, str(partial), kind.upper()],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        partial.rename(target)
    return str(target)


@dataclass
class Sample:
    tokens: int  # completion tokens the server reported (or content chunks, where it reports none)
    chunks: int
    ttft: float
    stream_rate: float


@dataclass
class Figures:
    aggregate: list[float] = field(default_factory=list)
    per_stream: list[float] = field(default_factory=list)
    ttft: list[float] = field(default_factory=list)  # every request's, all rounds
    short: int = 0  # responses that were not exactly max_tokens


def end_token_bias(model: str) -> dict[str, float]:
    """`logit_bias` banning every end-of-generation token of `model` (its vocabulary alone is read)."""
    import llama_cpp

    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    loaded = llama_cpp.llama_model_load_from_file(model.encode(), params)
    vocab = llama_cpp.llama_model_get_vocab(loaded)
    ends = [t for t in range(llama_cpp.llama_vocab_n_tokens(vocab)) if llama_cpp.llama_vocab_is_eog(vocab, t)]
    llama_cpp.llama_model_free(loaded)
    return {str(t): -100.0 for t in ends}


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """`--model` and `--cache`, as every benchmark beside llama-server takes them; `model_path` reads them."""
    parser.add_argument("--model", default=None, help="GGUF file (default: the packaged default model)")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "asgi_llm_bench")


def model_path(args: argparse.Namespace) -> str:
    if args.model is not None:
        return str(args.model)
    from asgi_llm.config import default_model_path

    return default_model_path()


def serve_options(model: str, threads: int, parallel: int) -> list[str]:
    """`asgi-llm serve`'s options matching `theirs`: model, threads, positions per sequence, sequences."""
    options = ["--model", model, "--model-id", MODEL_ID, "--threads", str(threads), "--n-ctx", str(N_CTX)]
    return [*options, "--parallel", str(parallel), "--flash-attn", "on", "--no-web-ui"]


def ours(model: str, threads: int, parallel: int) -> ChildServer:
    return ChildServer("", {}, command=asgi_llm_serve(*serve_options(model, threads, parallel)))


def theirs(binary: Path, model: str, threads: int, parallel: int) -> ChildServer:
    return ChildServer(
        "",
        {},
        health="/health",
        command=lambda port: [
            str(binary),
            "-m",
            model,
            "--alias",
            MODEL_ID,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "-t",
            str(threads),
            "-tb",
            str(threads),
            "-c",
            str(N_CTX * parallel),
            "-np",
            str(parallel),
            "--no-kv-unified",
            "-fa",
            "on",
            "--no-webui",
            "--jinja",
        ],
    )


async def retried(call: Callable[[], Awaitable[T]]) -> T:
    """`call`, once more if the server closed a kept-alive connection just as it was reused."""
    try:
        return await call()
    except httpx.RemoteProtocolError:
        return await call()


async def chat_chunks(client: httpx.AsyncClient, body: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
    """The JSON chunks of one streamed chat completion."""
    async with client.stream("POST", "/v1/chat/completions", json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if line.startswith("data: {"):
                yield json.loads(line[6:])


def content(chunk: dict[str, Any]) -> str | None:
    return ((chunk.get("choices") or [{}])[0].get("delta") or {}).get("content")


async def one_request(client: httpx.AsyncClient, tokens: int, bias: dict[str, float], temperature: float) -> Sample:
    return await retried(lambda: _one_request(client, tokens, bias, temperature))


async def _one_request(client: httpx.AsyncClient, tokens: int, bias: dict[str, float], temperature: float) -> Sample:
    body = {
        "model": MODEL_ID,
        "messages": MESSAGES,
        "max_tokens": tokens,
        "temperature": temperature,
        "logit_bias": bias,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    started = time.perf_counter()
    times: list[float] = []
    usage = None
    async for chunk in chat_chunks(client, body):
        if chunk.get("usage"):
            usage = chunk["usage"]["completion_tokens"]
        if content(chunk):
            times.append(time.perf_counter())
    rate = (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 else 0.0
    return Sample(usage if usage is not None else len(times), len(times), times[0] - started, rate)


async def load(
    base: str, concurrency: int, requests: int, tokens: int, bias: dict[str, float], temperature: float = 0.0
) -> tuple[float, list[Sample]]:
    """Aggregate tokens/s of `concurrency` clients sending `requests` streams each, and every sample."""
    samples, elapsed = await concurrent_streams(
        base, concurrency, requests, lambda client: one_request(client, tokens, bias, temperature)
    )
    return sum(s.tokens for s in samples) / elapsed, samples


class InProcess:
    """llama-cpp-python's `create_chat_completion(stream=True)` in this process, one stream."""

    def __init__(self, model: str, threads: int, tokens: int) -> None:
        import llama_cpp

        self._llm = llama_cpp.Llama(
            model_path=model, n_ctx=N_CTX, n_threads=threads, n_threads_batch=threads, flash_attn=True, verbose=False
        )
        self.bias = end_token_bias(model)
        self._tokens = tokens
        self.sample()  # warm-up

    def sample(self) -> Sample:
        started = time.perf_counter()
        chunks = self._llm.create_chat_completion(
            messages=MESSAGES,  # type: ignore[arg-type]
            max_tokens=self._tokens,
            temperature=0,
            logit_bias={int(t): b for t, b in self.bias.items()},
            stream=True,
        )
        times = [time.perf_counter() for c in chunks if c["choices"][0]["delta"].get("content")]  # type: ignore[index,union-attr]
        elapsed = time.perf_counter() - started
        sample = Sample(len(times), len(times), times[0] - started, (len(times) - 1) / (times[-1] - times[0]))
        sample.aggregate = len(times) / elapsed  # type: ignore[attr-defined]
        return sample

    def close(self) -> None:
        self._llm.close()
        gc.collect()


def p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def measure(kind: str, model: str, server_bin: Path, args: argparse.Namespace) -> None:
    print(f"\n== {kind.upper()}: {Path(model).name}", flush=True)
    reference = InProcess(model, args.threads, args.tokens)
    sides = {
        "ours": ours(model, args.threads, args.parallel),
        "llama-server": theirs(server_bin, model, args.threads, args.parallel),
    }
    figures = {(side, c): Figures() for side in sides for c in CONCURRENCY}
    inproc = Figures()
    with sides["ours"], sides["llama-server"]:
        for rnd in range(args.rounds):
            order = list(sides) if rnd % 2 == 0 else list(reversed(sides))
            s = reference.sample()
            inproc.aggregate.append(s.aggregate)  # type: ignore[attr-defined]
            inproc.per_stream.append(s.stream_rate)
            inproc.ttft.append(s.ttft)
            for concurrency in CONCURRENCY:
                for side in order:
                    aggregate, samples = asyncio.run(
                        load(sides[side].url, concurrency, args.requests, args.tokens, reference.bias, args.temperature)
                    )
                    f = figures[side, concurrency]
                    f.aggregate.append(aggregate)
                    f.per_stream.append(statistics.median(x.stream_rate for x in samples))
                    f.ttft.extend(x.ttft for x in samples)
                    f.short += sum(
                        x.tokens != args.tokens or x.chunks not in (args.tokens, args.tokens - 1) for x in samples
                    )
            print(f"  round {rnd + 1}/{args.rounds} done", flush=True)
    reference.close()

    med = statistics.median
    print(
        f"in-process llama-cpp-python (C=1): {med(inproc.aggregate):.1f} t/s aggregate, "
        f"{med(inproc.per_stream):.1f} t/s per stream, TTFT p50 {p(inproc.ttft, 0.5) * 1000:.0f} ms"
    )
    print(
        f"{'C':>3}{'ours t/s':>10}{'theirs t/s':>12}{'ours/theirs':>13}{'ours stream':>13}{'theirs stream':>15}"
        f"{'TTFT p50 ms ours/theirs':>25}{'TTFT p95 ms ours/theirs':>25}"
    )
    for c in CONCURRENCY:
        o, t = figures["ours", c], figures["llama-server", c]
        print(
            f"{c:>3}{med(o.aggregate):>10.1f}{med(t.aggregate):>12.1f}{med(o.aggregate) / med(t.aggregate):>13.2f}"
            f"{med(o.per_stream):>13.1f}{med(t.per_stream):>15.1f}"
            f"{p(o.ttft, 0.5) * 1000:>14.0f} / {p(t.ttft, 0.5) * 1000:<8.0f}"
            f"{p(o.ttft, 0.95) * 1000:>14.0f} / {p(t.ttft, 0.95) * 1000:<8.0f}"
        )
        for side, f in (("ours", o), ("llama-server", t)):
            if f.short:
                print(f"WARNING: {f.short} responses of {side} were not exactly {args.tokens} tokens", file=sys.stderr)
    o1 = figures["ours", 1]
    print(
        f"ours / in-process at C=1: aggregate {med(o1.aggregate) / med(inproc.aggregate):.2f}, "
        f"per stream {med(o1.per_stream) / med(inproc.per_stream):.2f}",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--temperature", type=float, default=0.0, help="> 0: sampled requests (see above)")
    parser.add_argument("--requests", type=int, default=2, help="requests per client per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--parallel", type=int, default=max(CONCURRENCY), help="sequences, both servers")
    parser.add_argument(
        "--types", default="model,q4_k_m,q4_0", help="weight types; `model` is the model as given (packaged: Q4_1)"
    )
    add_model_arguments(parser)
    args = parser.parse_args()
    args.model = model_path(args)
    server_bin, quantize = build(args.cache)
    busy = cpu_busy()
    print(f"cores: {os.cpu_count()}  threads: {args.threads}  max_tokens: {args.tokens}  parallel: {args.parallel}")
    print(f"CPU busy before start: {busy:.0%}" if busy is not None else "CPU busy before start: unknown")
    if busy is not None and busy > 0.1:
        print("WARNING: other processes are using the CPU; figures are noisy", file=sys.stderr)
    for kind in args.types.split(","):
        model = args.model if kind == "model" else requantized(quantize, args.model, kind, args.cache)
        measure(kind, model, server_bin, args)


if __name__ == "__main__":
    main()
