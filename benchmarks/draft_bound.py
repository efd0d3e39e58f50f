"""How fast drafting can make one stream on this machine: the bound that step costs set, whatever
the drafter, beside what prompt lookup as we serve it gets, on the texts of `speculative.py`.

    .venv/bin/python benchmarks/draft_bound.py [--threads 2] [--tokens 256] [--model GGUF]

A draft pays only where the tokens it adds to a step cost less than the steps they save. On a
CPU a step's cost grows with its tokens (the packaged Q4_1 weights are multiplied a row at a
time), so a stream's speed-up has a ceiling however good the drafts are. This measures it:

1. **Step costs**: bare `llama_decode` of n tokens of one sequence after a 300-token prompt,
   n from 1 to 65, the median of 15 (the same kernels, threads and flash attention as the
   server), through llama-cpp-python's own bindings.
2. **Texts**: the greedy reply to each of `speculative.py`'s one-client workloads (code edit,
   quote, free chat), its prompt rendered with the GGUF's own chat template.
3. **Replayed drafting** over each reply, each step costed from (1):
   - `served`: prompt lookup as `asgi_llm` drafts (`PromptLookup`, n-grams 4 to 2, a reach
     that doubles while drafts are taken whole up to `speculative_draft` 8 and falls to what
     was taken plus one, at most 15 drafted tokens a step);
   - `lookup oracle`: the same lookup, each draft cut to what the model takes, at the length
     that makes the step's tokens cheapest: no lookup drafter does better on this text;
   - `any oracle`: the reply's own next tokens, at the cheapest length: no drafter at all does
     better on this machine.

Each is printed as its rate over plain decoding (one token a step). The replay leaves out what
is not the step's decode (picks, hand-off, HTTP), which drafting does not change much, so it
is the decode-bound ratio, comparable to `speculative.py`'s `ours ngram / ours off`.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time
from collections.abc import Callable, Sequence

import jinja2
import llama_cpp
from speculative import WORKLOADS

from asgi_llm.config import default_model_path
from asgi_llm.engines.llamacpp.lookup import PromptLookup

SIZES = (1, 2, 3, 5, 9, 13, 17, 25, 33, 49, 65)
TEXTS = ("code edit", "quote", "free chat")
Cost = Callable[[int], float]


def step_costs(llm: llama_cpp.Llama, repeats: int = 15) -> dict[int, float]:
    """Seconds to decode n tokens of one sequence after a 300-token prompt, by n."""
    ctx, memory = llm.ctx, llama_cpp.llama_get_memory(llm.ctx)
    batch = llama_cpp.llama_batch_init(max(SIZES), 0, 1)

    def decode(tokens: Sequence[int], start: int) -> None:
        batch.n_tokens = len(tokens)
        for i, token in enumerate(tokens):
            batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.logits[i] = token, start + i, 1, 1
            batch.seq_id[i][0] = 0
        if llama_cpp.llama_decode(ctx, batch) != 0:
            raise RuntimeError("llama_decode failed")

    llama_cpp.llama_memory_clear(memory, True)
    for start in range(0, 300, 50):
        decode([100 + (i * 37) % 4000 for i in range(start, start + 50)], start)
    costs = {}
    for n in SIZES:
        times = []
        for _ in range(repeats):
            began = time.perf_counter()
            decode([500 + i for i in range(n)], 300)
            times.append(time.perf_counter() - began)
            llama_cpp.llama_memory_seq_rm(memory, 0, 300, -1)
        costs[n] = statistics.median(times)
    llama_cpp.llama_batch_free(batch)
    llama_cpp.llama_memory_clear(memory, True)  # the replies begin from an empty cache
    return costs


def interpolated(costs: dict[int, float]) -> Cost:
    points = sorted(costs.items())

    def cost(n: int) -> float:
        for (a, ca), (b, cb) in itertools.pairwise(points):
            if a <= n <= b:
                return ca + (cb - ca) * (n - a) / (b - a)
        (a, ca), (b, cb) = points[-2], points[-1]
        return cb + (cb - ca) / (b - a) * (n - b)

    return cost


def reply(llm: llama_cpp.Llama, workload: str, tokens: int) -> tuple[list[int], list[int]]:
    """The prompt's tokens and the greedy reply's."""
    template = jinja2.Environment(autoescape=False).from_string(llm.metadata["tokenizer.chat_template"])
    text = template.render(messages=WORKLOADS[workload]["messages"], add_generation_prompt=True)
    prompt = llm.tokenize(text.encode(), add_bos=False, special=True)
    out: list[int] = []
    for token in llm.generate(prompt, top_k=1, temp=0.0, reset=True):
        if llama_cpp.llama_vocab_is_eog(llama_cpp.llama_model_get_vocab(llm.model), token) or len(out) >= tokens:
            break
        out.append(token)
    return prompt, out


def replay(prompt: list[int], out: list[int], cost: Cost, oracle: str | None) -> float:
    """The reply's rate over plain decoding when each step drafts as `oracle` says (None: as served)."""
    lookup = PromptLookup([*prompt, out[0]], longest=4, shortest=2)
    at, seconds, reach, most = 1, 0.0, 8, 8
    while at < len(out):
        future = out[at + 1 :]
        if oracle == "any":
            draft = future[:64]
        else:
            draft = lookup.draft(64 if oracle else min(reach, 15))
        taken = 0
        while taken < len(draft) and taken < len(future) and draft[taken] == future[taken]:
            taken += 1
        if oracle:  # the prefix of what is taken whose step makes tokens cheapest
            taken = max(range(taken + 1), key=lambda j: (j + 1) / cost(1 + j))
            draft = draft[:taken]
        elif draft:
            reach = min(most, 2 * reach) if taken == len(draft) else taken + 1
        seconds += cost(1 + len(draft))
        lookup.extend(out[at + 1 : at + 2 + taken])
        at += taken + 1
    return cost(1) * (len(out) - 1) / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--model", default=None)
    args = parser.parse_args()
    model = args.model or str(default_model_path())
    llm = llama_cpp.Llama(
        model,
        n_ctx=2048,
        n_batch=512,
        n_threads=args.threads,
        n_threads_batch=args.threads,
        flash_attn=True,
        verbose=False,
    )
    costs = step_costs(llm)
    print(f"model: {model}, {args.threads} threads")
    print("bare decode of n tokens, ms: " + ", ".join(f"{n}: {s * 1000:.1f}" for n, s in costs.items()))
    cheapest = min(costs, key=lambda n: costs[n] / n)
    print(f"cheapest per token: {cheapest} tokens a step, {costs[cheapest] / cheapest * 1000:.1f} ms a token\n")
    cost = interpolated(costs)
    print("| reply | tokens | served lookup | lookup oracle | any oracle |")
    print("|---|---|---|---|---|")
    for workload in TEXTS:
        prompt, out = reply(llm, workload, args.tokens)
        rates = [replay(prompt, out, cost, oracle) for oracle in (None, "lookup", "any")]
        print(f"| {workload} | {len(out)} | " + " | ".join(f"{r:.2f}×" for r in rates) + " |")


if __name__ == "__main__":
    main()
