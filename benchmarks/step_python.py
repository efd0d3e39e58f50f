"""Our own Python in a decode step, per sequence, at 1, 16, 64 and 128 concurrent greedy streams:
what the scheduler, the picks, the detokenizing and the stop checks cost beside llama.cpp's work.

    .venv/bin/python benchmarks/_standin.py tiny /tmp/tiny.gguf
    .venv/bin/python benchmarks/step_python.py [--model /tmp/tiny.gguf] [--concurrency 1,16,64,128]
        [--tokens 96] [--rounds 3]

In this process, no HTTP and no event loop: the engine's `Runtime` (its scheduler, choices and
samplers, as served) is loaded with `parallel` = C and stepped on this thread, C greedy
completions at once. Every `llama_decode` is timed in this thread's CPU time (`time.thread_time`,
with one llama.cpp thread, so its compute runs here too), and a step's Python is its CPU time less
the time inside `llama_decode`. Only steps that decode one token of each of the C streams count
(the prompts read, nothing admitted or ending); the table gives the median step's Python divided
by C, the best round's. Use a stand-in whose decode is cheap (`_standin.py tiny`: 64 wide, 2
layers, with the packaged model's 49,152-token vocabulary), so that what is measured is ours.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import llama_cpp

from asgi_llm.config import ModelConfig
from asgi_llm.core import CompletionRequest, SamplingParams
from asgi_llm.engines.decoding.constraints import constraint_for
from asgi_llm.engines.llamacpp.choice import Tally
from asgi_llm.engines.llamacpp.jobs import Ticket
from asgi_llm.engines.llamacpp.runtime import Runtime

PROMPTS = ("The sky is", "Water is", "Once upon a time", "def main():", "Paris is the", "1, 2, 3,")


class DecodeClock:
    """`llama_decode` wrapped: the thread CPU time spent inside it, and the last batch's size."""

    def __init__(self) -> None:
        self.inside = 0.0
        self.tokens = 0
        self._decode = llama_cpp.llama_decode

    def __call__(self, ctx: Any, batch: Any) -> int:
        started = time.thread_time()
        try:
            return int(self._decode(ctx, batch))
        finally:
            self.inside += time.thread_time() - started
            self.tokens = int(batch.n_tokens)


def one_round(runtime: Runtime, clock: DecodeClock, streams: int, tokens: int) -> list[tuple[float, float]]:
    """Of each step that decoded one token of every stream: seconds of Python per sequence, and
    seconds inside `llama_decode`."""
    sent: list[object] = []
    for i in range(streams):
        request = CompletionRequest(
            model="m",
            prompts=(PROMPTS[i % len(PROMPTS)] + f" {i}",),
            sampling=SamplingParams(max_tokens=tokens, temperature=0),
        )
        runtime.submit(request, Ticket(lambda item: sent.append(item) is None, 1), constraint_for(request))
    per_sequence = []
    while runtime.active:
        inside, started = clock.inside, time.thread_time()
        clock.tokens = 0
        runtime.step()
        decoding = clock.inside - inside
        ours = time.thread_time() - started - decoding
        if clock.tokens == streams and runtime.scheduler.running == streams:
            per_sequence.append((ours / streams, decoding))
    return per_sequence


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="/tmp/tiny.gguf")
    parser.add_argument("--concurrency", default="1,16,64,128")
    parser.add_argument("--tokens", type=int, default=96, help="max_tokens of each stream")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    clock = DecodeClock()
    llama_cpp.llama_decode = clock  # native.py calls it through the module
    print(f"{'streams':>8} {'steps':>6} {'Python µs/seq/step':>19} {'p90':>8} {'llama_decode µs/step':>21}")
    for streams in (int(c) for c in args.concurrency.split(",")):
        config = ModelConfig(
            path=args.model, n_ctx=256, parallel=streams, n_threads=1, adapt_threads=False, prompt_cache_mib=0
        )
        runtime = Runtime(config, lambda fraction: None, Tally())
        try:
            one_round(runtime, clock, streams, 8)  # warm up
            best: list[float] = []
            decode = 0.0
            for _ in range(args.rounds):
                steps = one_round(runtime, clock, streams, args.tokens)
                ours = [python for python, _ in steps]
                if ours and (not best or statistics.median(ours) < statistics.median(best)):
                    best, decode = ours, statistics.median(inside for _, inside in steps)
        finally:
            runtime.close()
        if not best:
            print(f"{streams:>8} {0:>6} (no step decoded every stream: they ended early)")
            continue
        p90 = statistics.quantiles(best, n=10)[-1] if len(best) > 1 else best[0]
        print(
            f"{streams:>8} {len(best):>6} {statistics.median(best) * 1e6:>19.1f} {p90 * 1e6:>8.1f} {decode * 1e6:>21.0f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
