"""One decode step on a GPU, taken apart: where the time of a batched step goes, outside the server.

The server's step at C clients costs C / (its tokens/s); this script times the same model's bare
step at the same batch, through our own `Decoder` (asgi_llm/engines/llamacpp/native.py):
- `submit`: `llama_decode` until it returns (graph build, scheduling, kernel launches);
- `sync`: `llama_synchronize` after it (the GPU finishing the queued work);
- `read`: every row's logits copied out and arg-maxed with numpy (the least any sampler does).
The server's step minus `submit + sync + read` is our own per-step CPU work (planning, sampling,
detokenizing, streaming). Run it under `nsys profile --stats=true` for the kernel and launch counts.

Run: python benchmarks/gpu_step.py MODEL.gguf [--sequences 64] [--steps 64] [--n-ctx 512]
     [--flash-attn on|off|auto] [--kv-unified] [--device gpu|cpu] [--threads T]
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import time

import llama_cpp
import numpy as np

from asgi_llm.config import ModelConfig
from asgi_llm.engines.llamacpp.jobs import BatchToken
from asgi_llm.engines.llamacpp.native import Decoder, Model, new_context

PROMPT = 32  # positions each sequence holds before the timed steps


def step_times(decoder: Decoder, vocab: int, sequences: int, steps: int) -> dict[str, list[float]]:
    """Milliseconds per step for each part, after a prefill of PROMPT tokens per sequence."""
    prefill = [
        BatchToken(1 + (i * 7 + s) % 500, i, s, i == PROMPT - 1) for s in range(sequences) for i in range(PROMPT)
    ]
    for start in range(0, len(prefill), decoder.capacity):
        decoder.decode(prefill[start : start + decoder.capacity])
    ctx = decoder.context.ctx
    llama_cpp.llama_synchronize(ctx)
    tokens = [1] * sequences
    times: dict[str, list[float]] = {"submit": [], "sync": [], "read": []}
    for step in range(steps):
        batch = [BatchToken(tokens[s], PROMPT + step, s, True) for s in range(sequences)]
        started = time.perf_counter()
        decoder.decode(batch)
        submitted = time.perf_counter()
        llama_cpp.llama_synchronize(ctx)
        synced = time.perf_counter()
        for row in range(sequences):
            pointer = decoder.logits(row)
            logits = np.ctypeslib.as_array(ctypes.cast(pointer, ctypes.POINTER(ctypes.c_float)), shape=(vocab,))
            tokens[row] = int(logits.argmax())
        read = time.perf_counter()
        times["submit"].append((submitted - started) * 1000)
        times["sync"].append((synced - submitted) * 1000)
        times["read"].append((read - synced) * 1000)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--sequences", default="1,16,64,128", help="batch sizes, comma-separated")
    parser.add_argument("--steps", type=int, default=64)
    parser.add_argument("--n-ctx", type=int, default=512, help="positions per sequence")
    parser.add_argument("--flash-attn", choices=["on", "off", "auto"], default="on")
    parser.add_argument("--kv-unified", action="store_true")
    parser.add_argument("--device", choices=["gpu", "cpu"], default="gpu")
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    args = parser.parse_args()
    counts = [int(c) for c in args.sequences.split(",")]
    flash = {"on": True, "off": False}.get(args.flash_attn, "auto")
    config = ModelConfig(
        path=args.model,
        n_ctx=args.n_ctx,
        parallel=max(counts),
        n_gpu_layers=-1 if args.device == "gpu" else 0,
        flash_attn=flash,
        kv_unified=args.kv_unified,
        n_threads=args.threads,
        n_batch=2048,
    )
    model = Model(config)
    vocab = int(llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(model.native.model)))
    print(f"{os.path.basename(args.model)}: flash attention {args.flash_attn}, kv_unified {args.kv_unified}")
    print("| sequences | submit ms | sync ms | read ms | step ms | tokens/s bound |")
    print("|---|---|---|---|---|---|")
    for count in counts:
        decoder = Decoder(new_context(model, config.model_copy(update={"parallel": count}), sequences=count))
        try:
            times = step_times(decoder, vocab, count, args.steps)
        finally:
            decoder.close()
        median = {part: statistics.median(values[4:]) for part, values in times.items()}  # past warm-up
        step = sum(median.values())
        print(
            f"| {count} | {median['submit']:.2f} | {median['sync']:.2f} | {median['read']:.2f} "
            f"| {step:.2f} | {count / step * 1000:.0f} |",
            flush=True,
        )
    model.close()


if __name__ == "__main__":
    main()
