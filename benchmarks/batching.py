"""Throughput under concurrent load over real HTTP streaming: continuous batching vs. one request at
a time, each as a ratio to in-process llama-cpp-python on the same prompt, measured in the same run.

Three sides, never running at the same time:
1. in-process: llama-cpp-python's `create_completion(stream=True)` from one thread in this process
   (same model, thread count, raw prompt, greedy sampling, `max_tokens`): the single-stream reference,
   sampled again around every round; each round's ratio is to those adjacent samples.
2. batched: `LLMApp` under uvicorn in a child process with `parallel` sequences.
3. one-at-a-time: the same server with `parallel=1` (the engine's previous mode: FIFO, one generation).

Against each server, C clients (C = 1, 4, 8) send streaming completions back to back, R requests each.
Aggregate tokens/s = all completion tokens / wall time of the round; per-stream tokens/s = (tokens - 1) /
(last token - first token) of one response; time to first token = request sent to first text chunk.

Before the servers it also times bare `llama_decode` steps of 1, 4 and 8 rows on a batched context (no
sampling, no Python per token): the most batching can give on this machine, build and weight type.
End-of-generation tokens are banned (logit bias) on every side, so each response is `max_tokens` long.

The packaged model is Q4_1, a type llama.cpp's x86 CPU kernels multiply one row at a time: a step of
4 rows costs ~3x a step of 1. `--requantize q4_0` derives a Q4_0 copy of the model (in a temporary
folder; both sides use it), whose weights llama.cpp repacks for batched matrix kernels.

Run: .venv/bin/python benchmarks/batching.py [--tokens N] [--requests R] [--parallel P] [--threads T]
     [--flash-attn on|off] [--model GGUF] [--requantize q4_0|q8_0]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
from _server import ChildServer, concurrent_streams, cpu_busy

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


def requantized(model: str, kind: str, folder: str) -> str:
    """A copy of `model` with its weights converted to `kind` (llama.cpp's own quantizer)."""
    import ctypes

    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = {"q4_0": llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_0, "q8_0": llama_cpp.LLAMA_FTYPE_MOSTLY_Q8_0}[kind]
    params.allow_requantize = True
    target = str(Path(folder) / f"{Path(model).stem}.{kind}.gguf")
    if llama_cpp.llama_model_quantize(model.encode(), target.encode(), ctypes.byref(params)) != 0:
        raise SystemExit(f"could not requantize {model} to {kind}")
    return target


def end_tokens(llm) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """A logit bias that bans every end-of-generation token, so each response runs to max_tokens."""
    import llama_cpp

    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    return {str(t): -100.0 for t in range(llm.n_vocab()) if llama_cpp.llama_vocab_is_eog(vocab, t)}


class InProcess:
    """llama-cpp-python's `create_completion(stream=True)` in this process: the single-stream reference.
    It stays loaded, so each server round is compared with samples taken just before and after it
    (a shared machine's speed drifts over minutes)."""

    def __init__(self, model: str, threads: int, flash_attn: bool, tokens: int) -> None:
        import llama_cpp

        self._llm = llama_cpp.Llama(
            model_path=model,
            n_ctx=1024,
            n_threads=threads,
            n_threads_batch=threads,
            flash_attn=flash_attn,
            verbose=False,
        )
        self.bias = end_tokens(self._llm)
        self._tokens = tokens
        self.sample()  # warm-up

    def sample(self) -> Sample:
        started = time.perf_counter()
        chunks = self._llm.create_completion(
            prompt=PROMPT,
            max_tokens=self._tokens,
            temperature=0,
            logit_bias={int(t): b for t, b in self.bias.items()},
            stream=True,
        )
        times = [time.perf_counter() for chunk in chunks if chunk["choices"][0]["text"]]
        return Sample(len(times), times[0] - started, (len(times) - 1) / (times[-1] - times[0]))

    def rate(self, repeats: int) -> float:
        return statistics.median(self.sample().stream_rate for _ in range(repeats))

    def close(self) -> None:
        self._llm.close()
        gc.collect()


def decode_ceiling(
    model: str, threads: int, flash_attn: bool, rows: tuple[int, ...] = CONCURRENCY, steps: int = 30
) -> dict[int, float]:
    """Tokens/s of bare batched decode steps, `rows` sequences one token each (best of three)."""
    from asgi_llm.config import ModelConfig
    from asgi_llm.engines.llamacpp.jobs import BatchToken
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


async def one_request(client: httpx.AsyncClient, tokens: int, bias: dict[str, float]) -> Sample:
    body = {
        "model": MODEL_ID,
        "prompt": PROMPT,
        "max_tokens": tokens,
        "temperature": 0,
        "logit_bias": bias,
        "stream": True,
    }
    started = time.perf_counter()
    times = []
    async with client.stream("POST", "/completions", json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if line.startswith("data: {") and json.loads(line[6:])["choices"][0]["text"]:
                times.append(time.perf_counter())
    return Sample(len(times), times[0] - started, (len(times) - 1) / (times[-1] - times[0]))


async def load(
    base: str, concurrency: int, requests: int, tokens: int, bias: dict[str, float]
) -> tuple[float, list[Sample]]:
    samples, elapsed = await concurrent_streams(
        base, concurrency, requests, lambda client: one_request(client, tokens, bias), timeout=300
    )
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
    parser.add_argument("--requantize", choices=("q4_0", "q8_0"), help="benchmark a copy of the model in this type")
    args = parser.parse_args()
    if args.model is None:
        from asgi_llm.config import default_model_path

        args.model = default_model_path()
    with tempfile.TemporaryDirectory() as folder:
        if args.requantize:
            args.model = requantized(args.model, args.requantize, folder)
        run(args)


def run(args: argparse.Namespace) -> None:
    print(f"model: {Path(args.model).name}")
    print(
        f"cores: {os.cpu_count()}  threads: {args.threads}  max_tokens: {args.tokens}  parallel: {args.parallel}"
        f"  flash attention: {args.flash_attn}"
    )
    busy = cpu_busy()
    print(f"CPU busy before start: {busy:.0%}" if busy is not None else "CPU busy before start: unknown")
    if busy is not None and busy > 0.1:
        print("WARNING: other processes are using the CPU; every side will be skewed", file=sys.stderr)

    flash_attn = args.flash_attn == "on"
    reference = InProcess(args.model, args.threads, flash_attn, args.tokens)
    base = [reference.sample() for _ in range(3)]
    base_rate = statistics.median(s.stream_rate for s in base)
    base_ttft = statistics.median(s.ttft for s in base)
    print(f"\nin-process llama-cpp-python: {base_rate:.1f} tokens/s, time to first token {base_ttft * 1000:.0f} ms")
    ceiling = decode_ceiling(args.model, args.threads, flash_attn)
    gc.collect()
    print(
        "bare llama_decode, one token per row: "
        + "  ".join(f"{rows} rows {rate:.0f} t/s ({rate / base_rate:.2f}×)" for rows, rate in ceiling.items())
    )

    header = (
        f"{'mode':<14}{'C':>3}{'aggregate t/s':>15}{'in-proc t/s':>13}{'×':>7}"
        f"{'per-stream t/s':>16}{'TTFT p50 ms':>13}{'p95 ms':>8}"
    )
    print("\n" + header)
    for mode, parallel in (("batched", args.parallel), ("one-at-a-time", 1)):
        env = {
            "BENCH_MODEL": args.model,
            "BENCH_THREADS": str(args.threads),
            "BENCH_PARALLEL": str(parallel),
            "BENCH_FLASH_ATTN": args.flash_attn,
        }
        with ChildServer("batching:make_app", env) as server:
            for concurrency in CONCURRENCY:
                before = [reference.sample().stream_rate for _ in range(2)]
                aggregate, samples = asyncio.run(
                    load(server.url, concurrency, args.requests, args.tokens, reference.bias)
                )
                adjacent = statistics.median([*before, reference.sample().stream_rate])
                ttfts = [s.ttft * 1000 for s in samples]
                per_stream = statistics.median(s.stream_rate for s in samples)
                print(
                    f"{mode:<14}{concurrency:>3}{aggregate:>15.1f}{adjacent:>13.1f}{aggregate / adjacent:>7.2f}"
                    f"{per_stream:>16.1f}{p(ttfts, 0.5):>13.0f}{p(ttfts, 0.95):>8.0f}"
                )
                if any(s.tokens != args.tokens for s in samples):
                    print("WARNING: some responses ended before max_tokens", file=sys.stderr)
    reference.close()


if __name__ == "__main__":
    main()
