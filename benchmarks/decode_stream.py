"""Single-stream decode speed over real HTTP streaming, as a ratio to in-process llama-cpp-python.

Why this measures what it measures: ARCHITECTURE.md promises that serving adds no decode cost, because
every llama.cpp call runs on one inference thread (calls from a second thread cost most of the
speed). The fair reference is llama-cpp-python driven from a single thread in its own process, with
the same model, thread count, raw prompt and greedy sampling, so both sides decode the identical
token sequence. The rate is (tokens - 1) / (last token time - first token time) on both sides, so
model load, prompt processing and time to first token are excluded; what is left is the per-token
cost of decoding plus, on the server side, the pool, the SSE encoding, uvicorn and the socket.

The two sides never overlap: the in-process baseline runs first in this process and is freed, then
the server starts in a child process (uvicorn + `LLMApp`) and this process only acts as the client.

Run: .venv/bin/python benchmarks/decode_stream.py [--threads T] [--tokens N] [--repeats R] [--model PATH]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx
from _server import cpu_busy, free_port

PROMPT = "Write a long story about a lighthouse keeper.\n\n"
MODEL_ID = "bench"
HERE = Path(__file__).resolve().parent


def make_app():  # uvicorn --factory entry point, run in the server child process
    from asgi_llm import LLMApp
    from asgi_llm.config import ModelConfig, Settings

    config = ModelConfig(
        id=MODEL_ID,
        path=os.environ["BENCH_MODEL"],
        n_threads=int(os.environ["BENCH_THREADS"]),
        n_ctx=4096,
        flash_attn=True,  # as the in-process side: the same settings on both
    )
    return LLMApp(Settings(models=(config,)))


def rate(times: list[float]) -> float:
    """Decode tokens/s between the first and the last token's arrival."""
    return (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 else float("nan")


def complete_once(llm, tokens: int) -> tuple[int, float, str]:
    times, parts = [], []
    for chunk in llm.create_completion(prompt=PROMPT, max_tokens=tokens, temperature=0, stream=True):
        text = chunk["choices"][0]["text"]
        if text:  # one chunk per token (llama-cpp-python only merges partial UTF-8 characters)
            times.append(time.perf_counter())
            parts.append(text)
    return len(times), rate(times), "".join(parts)


def measure_in_process(model: str, threads: int, tokens: int, repeats: int) -> list[tuple[int, float, str]]:
    import llama_cpp

    llm = llama_cpp.Llama(
        model_path=model, n_ctx=4096, n_threads=threads, n_threads_batch=threads, flash_attn=True, verbose=False
    )
    complete_once(llm, tokens)  # warm-up
    runs = [complete_once(llm, tokens) for _ in range(repeats)]
    llm.close()
    del llm
    gc.collect()
    return runs


def stream_once(client: httpx.Client, url: str, tokens: int) -> tuple[int, float, str, int]:
    body = {
        "model": MODEL_ID,
        "prompt": PROMPT,
        "max_tokens": tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    times, parts, usage = [], [], -1
    with client.stream("POST", url, json=body) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[len("data: ") :])
            if chunk.get("usage"):
                usage = chunk["usage"]["completion_tokens"]
            for choice in chunk["choices"]:
                if choice["text"]:
                    times.append(time.perf_counter())
                    parts.append(choice["text"])
    return usage, rate(times), "".join(parts), len(times)




def measure_server(model: str, threads: int, tokens: int, repeats: int) -> list[tuple[int, float, str, int]]:
    port = free_port()
    env = {**os.environ, "BENCH_MODEL": model, "BENCH_THREADS": str(threads)}
    command = [sys.executable, "-m", "uvicorn", "--factory", "--app-dir", str(HERE), "decode_stream:make_app",
               "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"]  # fmt: skip
    server = subprocess.Popen(command, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(timeout=httpx.Timeout(120.0)) as client:
            deadline = time.monotonic() + 180
            while True:  # wait until the model is loaded
                if server.poll() is not None:
                    raise SystemExit(f"server exited with status {server.returncode}")
                if time.monotonic() > deadline:
                    raise SystemExit("server did not become healthy within 180 s")
                try:
                    if client.get(f"{base}/health").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                time.sleep(0.2)
            stream_once(client, f"{base}/completions", tokens)  # warm-up
            return [stream_once(client, f"{base}/completions", tokens) for _ in range(repeats)]
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--model", default=None, help="GGUF file (default: the packaged default model)")
    args = parser.parse_args()
    if args.model is None:
        from asgi_llm.config import default_model_path

        args.model = default_model_path()

    print(f"cores: {os.cpu_count()}  threads: {args.threads}  max_tokens: {args.tokens}  repeats: {args.repeats}")
    print(f"model: {args.model}")
    busy = cpu_busy()
    print(f"CPU busy before start: {busy:.0%}" if busy is not None else "CPU busy before start: unknown")
    if busy is not None and busy > 0.1:
        print("WARNING: other processes are using the CPU; both sides will be skewed", file=sys.stderr)
    baseline = measure_in_process(args.model, args.threads, args.tokens, args.repeats)
    served = measure_server(args.model, args.threads, args.tokens, args.repeats)

    base_rate = statistics.median(r for _, r, _ in baseline)
    served_rate = statistics.median(r for _, r, _, _ in served)
    base_tokens, served_tokens = baseline[0][0], served[0][0]
    print()
    print(f"{'side':<16}{'tokens':>8}{'tokens/s (median)':>20}   runs")
    for name, count, median, runs in (
        ("in-process", base_tokens, base_rate, [r for _, r, _ in baseline]),
        ("server (HTTP)", served_tokens, served_rate, [r for _, r, _, _ in served]),
    ):
        print(f"{name:<16}{count:>8}{median:>20.1f}   {' '.join(f'{r:.1f}' for r in runs)}")
    print(f"\nratio server/in-process: {served_rate / base_rate:.3f}")

    texts = {text for *_, text in baseline} | {text for _, _, text, _ in served}
    counts = {count for count, *_ in baseline} | {count for count, *_ in served} | {chunks for *_, chunks in served}
    if len(counts) > 1:
        print(f"WARNING: token counts differ between runs or sides: {sorted(counts)}", file=sys.stderr)
    if len(texts) > 1:
        print("WARNING: the generated texts differ between runs or sides", file=sys.stderr)
    if max(counts) < args.tokens:
        print(f"WARNING: fewer than {args.tokens} tokens were generated; pick a longer-running prompt", file=sys.stderr)


if __name__ == "__main__":
    main()
