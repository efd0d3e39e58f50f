"""Per-token cost of grammar-constrained decoding, as a ratio to unconstrained decoding, in-process.

Why this measures what it measures: structured output (`response_format` json_schema / json_object)
decodes under a llama.cpp grammar. The engine checks the grammar against the token the sampler chain
picks and only applies it to the whole vocabulary when that token is refused (see `_Sampling`), so the
cost per token should stay close to unconstrained decoding. This drives `LlamaCppEngine` on its
`InferenceThread` directly (no HTTP), with the packaged default model, the same chat prompt and greedy
sampling for all three variants, and measures decode tokens/s between the first and the last text event
of each generation: (completion_tokens - 1) / (last event time - first event time). Model load, prompt
processing and time to first token are excluded; each variant's grammar is built per request, before the
first token, so grammar construction is excluded too. One warm-up per variant, then the median of R runs,
variants interleaved run by run so drift hits them alike.

The closing watch (`decoding.closing.Closer`, which ends a grammar-held output inside its grammar before
its budget runs out) runs in Python on every constrained token; its own time is measured directly, by
timing every call into it, and printed as microseconds per token and as a share of an unconstrained
token's time. A fourth variant, json_schema with a third of the budget, makes it close the document early,
so its forced path is measured too. A fifth, json_schema_no_drafts, is json_schema with the request's
`speculative: false`: no grammar jump-forward (the text a grammar forces, drafted and verified in the next
step's decode; docs/performance.md), so the two lines compare tokens/s with drafting on and off, and the
tokens drafted and taken are printed. A sixth, json_schema_untold, asks for a story under the same
schema: the prompt tells the model of no JSON, so its favourite token is often refused, and each refused
pick is retaken (from the row's top tokens first, or with --whole-vocabulary over the whole vocabulary,
as before grammar_pick.py); the picks retaken and their time are printed.

Run: .venv/bin/python benchmarks/constrained_decoding.py [--threads T] [--tokens N] [--repeats R] [--model PATH]
    [--whole-vocabulary]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from asgi_llm.config import ModelConfig, default_model_path
from asgi_llm.core import ChatRequest, Finish, Message, OutputFormat, SamplingParams, TextDelta
from asgi_llm.engines.decoding.closing import Closer
from asgi_llm.engines.inference_thread import InferenceThread
from asgi_llm.engines.llamacpp import LlamaCppEngine, sampling

PROMPT = (
    "Describe a fictional person as a JSON object with the fields name, age, city, occupation and hobbies "
    "(a list of strings). Reply with the JSON object only."
)
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "city": {"type": "string"},
        "occupation": {"type": "string"},
        "hobbies": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["name", "age", "city", "occupation", "hobbies"],
}
VARIANTS = {
    "unconstrained": None,
    "json_schema": OutputFormat(kind="json_schema", param="response_format", schema=SCHEMA),
    "json_object": OutputFormat(kind="json_object", param="response_format"),
    "json_schema_cut": OutputFormat(kind="json_schema", param="response_format", schema=SCHEMA),
    "json_schema_no_drafts": OutputFormat(kind="json_schema", param="response_format", schema=SCHEMA),
    "json_schema_untold": OutputFormat(kind="json_schema", param="response_format", schema=SCHEMA),
}
UNTOLD = "Write a short story about a robot who learns to paint."
"""json_schema_untold's prompt: it asks for no JSON, so the model's favourite is often refused."""
REFUSED = {"seconds": 0.0, "picks": 0}  # time spent retaking picks the grammar refused, and how many
DRAFTS = {"drafted": 0, "accepted": 0}  # json_schema's runs: tokens jump-forward drafted, and those taken
WATCH = {"seconds": 0.0, "tokens": 0}  # time spent in the closing watch, and the tokens it chose


def timed(method: Callable[..., Any], tally: dict[str, Any], count: str) -> Callable[..., Any]:
    def run(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return method(*args, **kwargs)
        finally:
            tally["seconds"] += time.perf_counter() - start
            tally[count] += 1

    return run


def request(fmt: OutputFormat | None, tokens: int, name: str = "") -> ChatRequest:
    tokens = tokens // 3 if name.endswith("_cut") else tokens
    speculative = not name.endswith("_no_drafts")
    sampling = SamplingParams(max_tokens=tokens, temperature=0, output_format=fmt, speculative=speculative)
    prompt = UNTOLD if name.endswith("_untold") else PROMPT
    return ChatRequest(model="bench", messages=(Message("user", prompt),), sampling=sampling)


async def generate_once(
    engine: LlamaCppEngine, fmt: OutputFormat | None, tokens: int, name: str = ""
) -> tuple[int, float, str]:
    """Completion tokens, decode tokens/s between the first and the last text event, and the text."""
    times: list[float] = []
    parts: list[str] = []
    produced = 0
    async for event in engine.generate(request(fmt, tokens, name)):
        if isinstance(event, TextDelta) and event.text:
            times.append(time.perf_counter())
            parts.append(event.text)
        elif isinstance(event, Finish):
            produced = event.usage.completion_tokens
    span = times[-1] - times[0] if len(times) > 1 else 0.0
    return produced, (produced - 1) / span if span > 0 else float("nan"), "".join(parts)


async def measure(model: str, threads: int, tokens: int, repeats: int) -> dict[str, list[tuple[int, float, str]]]:
    thread = InferenceThread()
    thread.start()
    engine = LlamaCppEngine(ModelConfig(id="bench", path=model, n_threads=threads, n_ctx=2048), thread)
    try:
        await engine.load()
        for name, fmt in VARIANTS.items():  # warm-up
            await generate_once(engine, fmt, tokens, name)
        WATCH.update(seconds=0.0, tokens=0)
        REFUSED.update(seconds=0.0, picks=0)
        runs: dict[str, list[tuple[int, float, str]]] = {name: [] for name in VARIANTS}
        drafting = engine.runtime.drafting if engine.runtime is not None else None
        for _ in range(repeats):
            for name, fmt in VARIANTS.items():
                before = (drafting.drafted, drafting.accepted) if drafting is not None else (0, 0)
                runs[name].append(await generate_once(engine, fmt, tokens, name))
                if drafting is not None and name == "json_schema":
                    DRAFTS["drafted"] += drafting.drafted - before[0]
                    DRAFTS["accepted"] += drafting.accepted - before[1]
        return runs
    finally:
        await engine.close()
        await thread.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--tokens", type=int, default=96)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--model", default=None, help="GGUF file (default: the packaged default model)")
    parser.add_argument(
        "--whole-vocabulary", action="store_true", help="retake a refused pick over the whole vocabulary (as before)"
    )
    args = parser.parse_args()
    if args.whole_vocabulary:
        sampling.best_allowed = lambda logits, grammar: None
    model = args.model or default_model_path()
    print(f"cores: {os.cpu_count()}  threads: {args.threads}  max_tokens: {args.tokens}  repeats: {args.repeats}")
    print(f"model: {model}")

    Closer.choose = timed(Closer.choose, WATCH, "tokens")  # type: ignore[method-assign]  (every sampled token passes)
    sampling.Sampling._allowed = timed(sampling.Sampling._allowed, REFUSED, "picks")  # type: ignore[method-assign]
    runs = asyncio.run(measure(model, args.threads, args.tokens, args.repeats))
    medians = {name: statistics.median(r for _, r, _ in results) for name, results in runs.items()}
    base = medians["unconstrained"]
    print()
    print(f"{'variant':<22}{'tokens':>8}{'tokens/s (median)':>20}{'ratio':>8}   runs")
    for name, results in runs.items():
        counts = sorted({count for count, _, _ in results})
        shown = "/".join(str(c) for c in counts)
        rates = " ".join(f"{r:.1f}" for _, r, _ in results)
        print(f"{name:<22}{shown:>8}{medians[name]:>20.1f}{medians[name] / base:>8.3f}   {rates}")
    print()
    for name in VARIANTS:
        if name != "unconstrained":
            print(f"ratio {name}/unconstrained: {medians[name] / base:.3f}")
    drafts = medians["json_schema"] / medians["json_schema_no_drafts"]
    print(f"jump-forward: json_schema {medians['json_schema']:.1f} tokens/s with drafts, ", end="")
    print(f"{medians['json_schema_no_drafts']:.1f} without ({drafts:.3f}x); ", end="")
    print(f"{DRAFTS['accepted']} of {DRAFTS['drafted']} drafted tokens taken over {args.repeats} runs")
    per_token = WATCH["seconds"] / max(WATCH["tokens"], 1)
    share = per_token * base
    print(f"closing watch: {per_token * 1e6:.0f} us per constrained token over {WATCH['tokens']} tokens, ", end="")
    print(f"{share:.1%} of an unconstrained token ({1e3 / base:.1f} ms)")
    retake = REFUSED["seconds"] / max(REFUSED["picks"], 1)
    how = "the whole vocabulary" if args.whole_vocabulary else "the row's top first"
    print(f"refused picks: {REFUSED['picks']} over all runs, retaken from {how}: {retake * 1e3:.2f} ms each")
    for name, results in runs.items():
        texts = {text for _, _, text in results}
        if len(texts) > 1:
            print(f"WARNING: {name}: the generated texts differ between runs", file=sys.stderr)
        print(f"\n{name} output: {results[0][2]!r}")


if __name__ == "__main__":
    main()
