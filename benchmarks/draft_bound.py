"""How fast drafting can make one stream on this machine: the bound that step costs set, whatever
the drafter, beside what prompt lookup as we serve it gets, on the texts of `speculative.py`.

    .venv/bin/python benchmarks/draft_bound.py [--threads 2] [--tokens 256] [--model GGUF] [--more]

A draft pays only where the tokens it adds to a step cost less than the steps they save. On a
CPU a step's cost grows with its tokens (the packaged Q4_1 weights are multiplied a row at a
time), so a stream's speed-up has a ceiling however good the drafts are. This measures it:

1. **Step costs**: bare `llama_decode` of n tokens of one sequence after a 300-token prompt,
   n from 1 to 65, the median of 15 (the same kernels, threads and flash attention as the
   server), through llama-cpp-python's own bindings.
2. **Texts**: the greedy reply to each of `speculative.py`'s one-client workloads (code edit,
   quote, free chat), its prompt rendered with the GGUF's own chat template.
3. **Replayed drafting** over each reply, each step costed from (1):
   - `served`: prompt lookup as `asgi_llm` drafts (`PromptLookup`, n-grams 4 to 2, at most
     `speculative_draft` 8 tokens), each draft cut to the length `DraftPayoff.length` keeps by
     `DraftOdds`, the odds for the match it follows, learned over the replies in turn as a
     server learns them over its requests (a draft not made is judged as it would have fared;
     the sequence's own acceptance, which can stop it drafting at all, is left out);
   - `reach`: the rule `served` replaced, for comparison: a reach that doubles while drafts are
     taken whole, up to 8, and falls to what was taken plus one after a miss;
   - `lookup oracle`: the same lookup, each draft cut to what the model takes, at the length
     that makes the step's tokens cheapest: no lookup drafter does better on this text;
   - `any oracle`: the reply's own next tokens, at the cheapest length: no drafter at all does
     better on this machine.
4. **More texts** (`--more`): replies to requests over text nobody here wrote, the source and
   docstrings of Python's standard library (add a docstring, add type hints, quote a paragraph,
   summarise), beside a few of chat, a list, JSON and a table; the last row sums every reply.

Each is printed as its rate over plain decoding (one token a step). The replay leaves out what
is not the step's decode (picks, hand-off, HTTP), which drafting does not change much, so it
is the decode-bound ratio, comparable to `speculative.py`'s `ours ngram / ours off`.
"""

from __future__ import annotations

import argparse
import fractions
import inspect
import itertools
import json
import shlex
import statistics
import string
import textwrap
import time
from collections.abc import Callable, Sequence

import jinja2
import llama_cpp
from speculative import WORKLOADS

from asgi_llm.config import default_model_path
from asgi_llm.engines.llamacpp.draft_odds import DraftOdds
from asgi_llm.engines.llamacpp.draft_payoff import Acceptance, DraftPayoff
from asgi_llm.engines.llamacpp.lookup import PromptLookup

SIZES = (1, 2, 3, 5, 9, 13, 17, 25, 33, 49, 65)
TEXTS = ("code edit", "quote", "free chat")
Cost = Callable[[int], float]
DRAFT = 8  # speculative_draft's default


def more_requests() -> dict[str, str]:
    """Requests over the standard library's own source and docstrings, and a few of chat."""

    def code(ask: str, function: Callable[..., object]) -> str:
        return f"{ask}\n\n```python\n{inspect.getsource(function)[:1500]}```"

    def text(doc: str | None, ask: str) -> str:
        return f"{(doc or '')[:1500]}\n\n{ask}"

    whole = "Reply with the whole function only."
    return {
        "docstring: textwrap.dedent": code(f"Add a docstring to this function. {whole}", textwrap.dedent),
        "rename: shlex.split": code(
            f"Rename the variable `s` to `text` everywhere in this function. {whole}", shlex.split
        ),
        "hints: Fraction.limit_denominator": code(
            f"Add type hints to this function. {whole}", fractions.Fraction.limit_denominator
        ),
        "hints: JSONEncoder.iterencode": code(f"Add type hints to this function. {whole}", json.JSONEncoder.iterencode),
        "clearer: string.capwords": code(
            f"Rewrite this function with clearer variable names. {whole}", string.capwords
        ),
        "quote: json's docstring": text(json.__doc__, "Quote the first paragraph of the text above exactly."),
        "summary: inspect's docstring": text(inspect.__doc__, "Summarize the text above in three sentences."),
        "chat: a poem": "Write a short poem about the sea.",
        "chat: hash tables": "Explain how a hash table works, with an example.",
        "list: pancakes": "Give me a recipe for pancakes as a numbered list.",
        "json: people": "Turn this into a JSON array of objects with name and age: Alice 31, Bob 27, Carol 45, Dan 19.",
        "table: planets": "Make a markdown table of the planets of the solar system with whether they have rings.",
    }


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


def reply(llm: llama_cpp.Llama, messages: list[dict[str, str]], tokens: int) -> tuple[list[int], list[int]]:
    """The prompt's tokens and the greedy reply's."""
    template = jinja2.Environment(autoescape=False).from_string(llm.metadata["tokenizer.chat_template"])
    text = template.render(messages=messages, add_generation_prompt=True)
    prompt = llm.tokenize(text.encode(), add_bos=False, special=True)
    out: list[int] = []
    for token in llm.generate(prompt, top_k=1, temp=0.0, reset=True):
        if llama_cpp.llama_vocab_is_eog(llama_cpp.llama_model_get_vocab(llm.model), token) or len(out) >= tokens:
            break
        out.append(token)
    return prompt, out


class Served:
    """How `asgi_llm` cuts one stream's lookup drafts: the model's odds by match (learned over
    every reply replayed, as a server's over its requests) against step costs as measured."""

    def __init__(self, costs: dict[int, float]) -> None:
        self.odds, self.payoff = DraftOdds(DRAFT), DraftPayoff()
        cost = interpolated(costs)
        for _ in range(3):
            for n in range(1, DRAFT + 2):
                self.payoff.timed(n, cost(n))

    def length(self, draft: list[int], agreement: int) -> int:
        record = Acceptance(rate=1.0)
        record.asked = 1  # not a probe
        return self.payoff.length(record, self.odds.expected(agreement, len(draft)), 1, 1)


def taken(draft: Sequence[int], future: Sequence[int]) -> int:
    """How many of `draft`'s tokens the reply goes on with."""
    count = 0
    while count < len(draft) and count < len(future) and draft[count] == future[count]:
        count += 1
    return count


def replay(prompt: list[int], out: list[int], cost: Cost, rule: str, served: Served | None = None) -> float:
    """Seconds to decode the reply when each step drafts as `rule` says ("served", "reach",
    "lookup" or "any": the oracles); one token a step without drafts costs `cost(1)` a token."""
    lookup = PromptLookup([*prompt, out[0]], longest=4, shortest=2)
    at, seconds, reach = 1, 0.0, DRAFT
    while at < len(out):
        future = out[at + 1 :]
        if rule == "any":
            draft = future[:64]
        elif rule == "served" and served is not None:
            found, agreement = lookup.follows(DRAFT)
            draft = found[: served.length(found, agreement)]
            judged = draft or found  # a draft not made is judged as it would have fared
            served.odds.judged(agreement, len(judged), taken(judged, future))
        else:
            draft = lookup.draft(64 if rule == "lookup" else reach)
        took = taken(draft, future)
        if rule in ("lookup", "any"):  # the prefix of what is taken whose step makes tokens cheapest
            took = max(range(took + 1), key=lambda j: (j + 1) / cost(1 + j))
            draft = draft[:took]
        elif rule == "reach" and draft:
            reach = min(DRAFT, 2 * reach) if took == len(draft) else took + 1
        seconds += cost(1 + len(draft))
        lookup.extend(out[at + 1 : at + 2 + took])
        at += took + 1
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--model", default=None)
    parser.add_argument("--more", action="store_true", help="replies over the standard library's text too")
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
    requests = {workload: WORKLOADS[workload]["messages"] for workload in TEXTS}
    if args.more:
        requests |= {name: [{"role": "user", "content": text}] for name, text in more_requests().items()}
    rules = ("served", "reach", "lookup", "any")
    served, totals, plain_total = Served(costs), dict.fromkeys(rules, 0.0), 0.0
    print("| reply | tokens | served lookup | reach (before) | lookup oracle | any oracle |")
    print("|---|---|---|---|---|---|")
    for name, messages in requests.items():
        prompt, out = reply(llm, messages, args.tokens)
        if len(out) < 2:
            continue
        plain = cost(1) * (len(out) - 1)
        seconds = {rule: replay(prompt, out, cost, rule, served) for rule in rules}
        plain_total += plain
        for rule in rules:
            totals[rule] += seconds[rule]
        print(f"| {name} | {len(out)} | " + " | ".join(f"{plain / seconds[r]:.2f}×" for r in rules) + " |")
    if args.more:
        print("| all | | " + " | ".join(f"{plain_total / totals[r]:.2f}×" for r in rules) + " |")
    labels = {1: "1", 2: "2–3", 4: "4–7", 8: "8–15", 16: "16–31", 32: "32–63", 64: "64+"}
    shares = ", ".join(f"{label}: {served.odds.expected(agreement, 1)[0]:.0%}" for agreement, label in labels.items())
    print(f"\nserved: a first drafted token taken, by the agreement before it (the odds as learned): {shares}")


if __name__ == "__main__":
    main()
