"""Throughput under concurrent load over real HTTP streaming: continuous batching vs. one request at
a time, each as a ratio to in-process llama-cpp-python on the same prompt, measured in the same run.

Three sides, never running at the same time:
1. in-process: llama-cpp-python's `create_completion(stream=True)` from one thread in this process
   (same model, thread count, raw prompt, greedy sampling, `max_tokens`): the single-stream reference.
2. batched: `LLMApp` under uvicorn in a child process with `parallel` sequences.
3. one-at-a-time: the same server with `parallel=1` (the engine's previous mode: FIFO, one generation).

Against each server, C clients (C = 1, 4, 8) send streaming completions back to back, R requests each.
Aggregate tokens/s = all completion tokens / wall time of the round; per-stream tokens/s = (tokens - 1) /
(last token - first token) of one response; time to first token = request sent to first text chunk.

Before the servers it also times bare `llama_decode` steps of 1, 4 and 8 rows on a batched context (no
sampling, no Python per token): the most batching can give on this machine and build.

Run: .venv/bin/python benchmarks/batching.py [--tokens N] [--requests R] [--parallel P] [--threads T]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import statistics
import sys
import time
from dataclasses import dataclass

import httpx
from _server import ChildServer, cpu_busy

PROMPT = "Write a long story about a lighthouse keeper.\n\n"
MODEL_ID = "bench"
CONCURRENCY = (1, 4, 8)


def make_app():  # uvicorn --factory entry point, run in the server child process
    from asgi_llm import LLMApp
    from asgi_llm.config import ModelConfig, Settings

    config = ModelConfig(
        id=MODEL_ID,
        path=os.environ["BENCH_MODEL"],
        n_threads=int(os.environ["BENCH_THREADS"]),
        n_ctx=1024,
        parallel=int(os.environ["BENCH_PARALLEL"]),
        flash_attn=os.environ["BENCH_FLASH_ATTN"] == "on",
    )
    return LLMApp(Settings(models=(config,)))


@dataclass
class Sample:
    tokens: int
    ttft: float
    stream_rate: float


def in_process(model: str, threads: int, flash_attn: bool, tokens: int, repeats: int) -> list[Sample]:
    import llama_cpp

    llm = llama_cpp.Llama(
        model_path=model, n_ctx=1024, n_threads=threads, n_threads_batch=threads, flash_attn=flash_attn, verbose=False
    )
    samples = []
    for _ in range(repeats + 1):
        started = time.perf_counter()
        times = [
            time.perf_counter()
            for chunk in llm.create_completion(prompt=PROMPT, max_tokens=tokens, temperature=0, stream=True)
            if chunk["choices"][0]["text"]
        ]
        samples.append(Sample(len(times), times[0] - started, (len(times) - 1) / (times[-1] - times[0])))
    llm.close()
    del llm
    gc.collect()
    return samples[1:]  # the first was a warm-up


def decode_ceiling(model: str, threads: int, flash_attn: bool, rows: tuple[int, ...] = CONCURRENCY, steps: int = 30) -> dict[int, float]:
    """Tokens/s of bare batched decode steps, `rows` sequences one token each (best of three)."""
    from asgi_llm.config import ModelConfig
    from asgi_llm.engines.batching import BatchToken
    from asgi_llm.engines.llamacpp.native import Decoder, Model, new_context

    config = ModelConfig(path=model, n_threads=threads, n_ctx=1024, parallel=max(rows), flash_attn=flash_attn)
    weights = Model(config)
    decoder = Decoder(new_context(weights, config, sequences=max(rows)))
    prompt = weights.tokenize(PROMPT, add_bos=True)
    for sequence in range(max(rows)):
        decoder.decode([BatchToken(t, i, sequence, i == len(prompt) - 1) for i, t in enumerate(prompt)])
    rates = {}
    for count in rows:
        best = float("inf")
        for _ in range(3):
            started = time.perf_counter()
            for step in range(steps):
                decoder.decode([BatchToken(100, len(prompt) + step, s, True) for s in range(count)])
            best = min(best, (time.perf_counter() - started) / steps)
            for sequence in range(count):
                decoder.forget(sequence, len(prompt))
        rates[count] = count / best
    decoder.close()
    weights.close()
    return rates


async def one_request(client: httpx.AsyncClient, tokens: int) -> Sample:
    body = {"model": MODEL_ID, "prompt": PROMPT, "max_tokens": tokens, "temperature": 0, "stream": True}
    started = time.perf_counter()
    times = []
    async with client.stream("POST", "/completions", json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if line.startswith("data: {") and json.loads(line[6:])["choices"][0]["text"]:
                times.append(time.perf_counter())
    return Sample(len(times), times[0] - started, (len(times) - 1) / (times[-1] - times[0]))


async def load(base: str, concurrency: int, requests: int, tokens: int) -> tuple[float, list[Sample]]:
    limits = httpx.Limits(max_connections=concurrency)
    async with httpx.AsyncClient(base_url=base, timeout=300, limits=limits) as client:
        await one_request(client, tokens)  # warm-up

        async def worker() -> list[Sample]:
            return [await one_request(client, tokens) for _ in range(requests)]

        started = time.perf_counter()
        results = await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    samples = [s for r in results for s in r]
    return sum(s.tokens for s in samples) / elapsed, samples


def p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--requests", type=int, default=3, help="requests per client per round")
    parser.add_argument("--parallel", type=int, default=max(CONCURRENCY))
    parser.add_argument("--flash-attn", choices=("on", "off"), default="on", help="on both sides")
    parser.add_argument("--model", default=None, help="GGUF file (default: the packaged default model)")
    args = parser.parse_args()
    if args.model is None:
        from asgi_llm.config import default_model_path

        args.model = default_model_path()
    print(f"cores: {os.cpu_count()}  threads: {args.threads}  max_tokens: {args.tokens}  parallel: {args.parallel}"
          f"  flash attention: {args.flash_attn}")
    busy = cpu_busy()
    print(f"CPU busy before start: {busy:.0%}" if busy is not None else "CPU busy before start: unknown")
    if busy is not None and busy > 0.1:
        print("WARNING: other processes are using the CPU; every side will be skewed", file=sys.stderr)

    flash_attn = args.flash_attn == "on"
    base = in_process(args.model, args.threads, flash_attn, args.tokens, repeats=3)
    base_rate = statistics.median(s.stream_rate for s in base)
    base_ttft = statistics.median(s.ttft for s in base)
    print(f"\nin-process llama-cpp-python: {base_rate:.1f} tokens/s, time to first token {base_ttft * 1000:.0f} ms")
    ceiling = decode_ceiling(args.model, args.threads, flash_attn)
    gc.collect()
    print("bare llama_decode, one token per row: " + "  ".join(
        f"{rows} rows {rate:.0f} t/s ({rate / base_rate:.2f}×)" for rows, rate in ceiling.items()
    ))

    header = f"{'mode':<14}{'C':>3}{'aggregate t/s':>15}{'× in-proc':>11}{'per-stream t/s':>16}{'TTFT p50 ms':>13}{'p95 ms':>8}"
    print("\n" + header)
    for mode, parallel in (("batched", args.parallel), ("one-at-a-time", 1)):
        env = {"BENCH_MODEL": args.model, "BENCH_THREADS": str(args.threads), "BENCH_PARALLEL": str(parallel),
               "BENCH_FLASH_ATTN": args.flash_attn}
        with ChildServer("batching:make_app", env) as server:
            for concurrency in CONCURRENCY:
                aggregate, samples = asyncio.run(load(server.url, concurrency, args.requests, args.tokens))
                ttfts = [s.ttft * 1000 for s in samples]
                per_stream = statistics.median(s.stream_rate for s in samples)
                print(
                    f"{mode:<14}{concurrency:>3}{aggregate:>15.1f}{aggregate / base_rate:>11.2f}"
                    f"{per_stream:>16.1f}{p(ttfts, 0.5):>13.0f}{p(ttfts, 0.95):>8.0f}"
                )
                if any(s.tokens != args.tokens for s in samples):
                    print("WARNING: some responses ended before max_tokens", file=sys.stderr)


if __name__ == "__main__":
    main()
