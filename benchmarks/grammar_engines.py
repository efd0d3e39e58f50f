"""Our grammar engine beside llguidance, measured on the packaged model: which one structured output uses.

Why this measures what it measures (issue 27, item 3). Ours: a JSON schema rewritten by
`grammar.enforceable`, turned into GBNF by `schema_gbnf`, run by llama.cpp's grammar sampler and
followed by the closing watch, exactly as `Sampling` does in the engine (the grammar is checked
against the chain's pick and applied to the whole vocabulary only when it refuses it).
llguidance: the same schema through `LLMatcher.grammar_from_json_schema`, over the same
vocabulary (its llama.cpp tokenizer bridge), a full token mask computed every step and applied to
the logits with numpy, as a Python server without its own kernels would use it. Both decode the
same prompt greedily on one context, so per-token figures compare like with like:

1. per-token cost: the time of the sampling step alone (µs, median and mean over tokens and
   runs: ours is fast while the model's pick is allowed and pays a full-vocabulary pass when it
   is not) and the decode rate, next to unconstrained decoding;
2. compile time of a 50-property schema (to the first token's mask: llguidance builds lazily);
3. coverage of the pydantic table (tests/test_e2e/pydantic_table.py): whether each engine takes
   each model's schema, and whether one greedy reply (budget 200) validates with pydantic itself.

Run: .venv/bin/pip install -e ".[bench]"   (llguidance: benchmark only, not needed by the package or its tests)
     .venv/bin/python benchmarks/grammar_engines.py [--threads T] [--tokens N] [--repeats R] [--budget B] [--only timing|coverage]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from llguidance import LLMatcher, LLTokenizer
from llguidance.llamacpp import lltokenizer_from_vocab
from llguidance.numpy import allocate_token_bitmask, fill_next_token_bitmask

from asgi_llm.config import ModelConfig
from asgi_llm.core import LLMError, SamplingParams
from asgi_llm.engines.decoding.grammar import enforceable
from asgi_llm.engines.decoding.schema_gbnf import schema_gbnf
from asgi_llm.engines.llamacpp.jobs import BatchToken
from asgi_llm.engines.llamacpp.native import Decoder, Model, new_single_context
from asgi_llm.engines.llamacpp.sampling import Sampling, accepted_grammar, readable

CTX = 1024
GREEDY = SamplingParams(temperature=0)
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 40},
        "age": {"type": "integer", "minimum": 0, "maximum": 130},
        "email": {"type": "string", "format": "email"},
        "code": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{2}$"},
        "hobbies": {"type": "array", "items": {"type": "string", "maxLength": 20}, "maxItems": 4},
    },
    "required": ["name", "age", "email", "code", "hobbies"],
    "additionalProperties": False,
}
_KINDS: list[dict[str, Any]] = [
    {"type": "string", "maxLength": 30},
    {"type": "integer", "minimum": -50, "maximum": 5000},
    {"type": "number", "exclusiveMinimum": 0, "maximum": 100},
    {"type": "string", "format": "date"},
    {"type": "string", "format": "email"},
    {"enum": ["red", "green", "blue"]},
    {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{4}$"},
    {"type": "boolean"},
    {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 5},
    {"type": "string", "format": "uuid"},
]
WIDE = {
    "type": "object",
    "properties": {f"field_{i}": _KINDS[i % len(_KINDS)] for i in range(50)},
    "required": [f"field_{i}" for i in range(0, 50, 2)],
    "additionalProperties": False,
}


def chatml(question: str) -> str:
    return f"<|im_start|>user\n{question}\nReply with JSON only.<|im_end|>\n<|im_start|>assistant\n"


class Ours:
    """The engine's own path: GBNF from our converter, llama.cpp's sampler, the closing watch."""

    name = "ours"

    def __init__(self, model: Model, decoder: Decoder, schema: dict[str, Any] | None) -> None:
        gbnf = accepted_grammar(model, schema_gbnf(enforceable(schema, "s")), "s") if schema is not None else None
        shape = readable(gbnf) if gbnf is not None else None
        self._sampling = Sampling(model, decoder.logits, GREEDY, 0, grammar=gbnf, shape=shape)
        self._context = decoder.context

    def pick(self, row: int, remaining: int) -> int:
        return self._sampling.sample(row, self._context, remaining)


class Guidance:
    """llguidance: a full mask each step, applied to the logits with numpy, then the greedy pick.
    JSON without free whitespace (its default allows any run of it, which a small model fills)."""

    name = "llguidance"

    def __init__(self, model: Model, decoder: Decoder, tokenizer: LLTokenizer, schema: dict[str, Any]) -> None:
        compact = LLMatcher.grammar_from_json_schema(schema, overrides={"whitespace_flexible": False})
        self.matcher = LLMatcher(tokenizer, compact, log_level=0)
        if self.matcher.is_error():
            raise ValueError(self.matcher.get_error())
        self._mask = allocate_token_bitmask(1, model.n_vocab)
        self._logits = decoder.logits
        self._n_vocab = model.n_vocab

    def pick(self, row: int, remaining: int) -> int:
        fill_next_token_bitmask(self.matcher, self._mask)
        allowed = np.unpackbits(self._mask.view(np.uint8), bitorder="little")[: self._n_vocab].astype(bool)
        logits = np.ctypeslib.as_array(self._logits(row), shape=(self._n_vocab,))
        token = int(np.where(allowed, logits, -np.inf).argmax())
        self.matcher.consume_token(token)
        return token


def generate(
    model: Model, decoder: Decoder, engine: Any, prompt: list[int], budget: int
) -> tuple[str, list[float], float]:
    """One greedy output: its text, each sampling step's seconds, and the decode rate (tokens/s)."""
    decoder.clear()
    decoder.decode([BatchToken(t, i, 0, i == len(prompt) - 1) for i, t in enumerate(prompt)])
    row, position, out, steps = len(prompt) - 1, len(prompt), [], []
    started = time.perf_counter()
    while len(out) < budget:
        before = time.perf_counter()
        token = engine.pick(row, budget - len(out))
        steps.append(time.perf_counter() - before)
        if model.is_end(token):
            break
        out.append(token)
        decoder.decode([BatchToken(token, position, 0, True)])
        row, position = 0, position + 1
    elapsed = time.perf_counter() - started
    return b"".join(model.piece(t) for t in out).decode("utf-8", "replace"), steps, len(out) / elapsed


def per_token(model: Model, decoder: Decoder, tokenizer: LLTokenizer, tokens: int, repeats: int) -> None:
    prompt = model.tokenize(chatml("Describe a person: name, age, email, an access code and hobbies."), add_bos=True)
    makers: dict[str, Callable[[], Any]] = {
        "unconstrained": lambda: Ours(model, decoder, None),
        "ours": lambda: Ours(model, decoder, PERSON),
        "llguidance": lambda: Guidance(model, decoder, tokenizer, PERSON),
    }
    steps: dict[str, list[float]] = {k: [] for k in makers}
    rates: dict[str, list[float]] = {k: [] for k in makers}
    texts: dict[str, str] = {}
    for make in makers.values():  # warm-up
        generate(model, decoder, make(), prompt, 8)
    for _ in range(repeats):
        for name, make in makers.items():
            text, times, rate = generate(model, decoder, make(), prompt, tokens)
            steps[name] += times
            rates[name].append(rate)
            texts[name] = text
    base_rate = statistics.median(rates["unconstrained"])
    print(f"\n## per-token cost (greedy, budget {tokens}, {repeats} runs)\n")
    base_mean = statistics.fmean(steps["unconstrained"])
    print("| engine | sampling step µs, median / mean | mean over unconstrained | tokens/s | ratio |")
    print("|---|---|---|---|---|")
    for name in makers:
        step, mean, rate = statistics.median(steps[name]), statistics.fmean(steps[name]), statistics.median(rates[name])
        extra = (mean - base_mean) * 1e6
        print(
            f"| {name} | {step * 1e6:.0f} / {mean * 1e6:.0f} | +{extra:.0f} µs | {rate:.1f} | {rate / base_rate:.3f} |"
        )
    for name, text in texts.items():
        print(f"{name}: {text!r}")


def compile_times(model: Model, tokenizer: LLTokenizer, repeats: int) -> None:
    def ours() -> None:
        readable(accepted_grammar(model, schema_gbnf(enforceable(WIDE, "s")), "s"))

    def guidance() -> None:
        compact = LLMatcher.grammar_from_json_schema(WIDE, overrides={"whitespace_flexible": False})
        matcher = LLMatcher(tokenizer, compact, log_level=0)
        assert not matcher.is_error(), matcher.get_error()
        fill_next_token_bitmask(matcher, allocate_token_bitmask(1, model.n_vocab))  # it builds lazily

    print("\n## compile time of a 50-property schema (to the first token's mask)\n")
    print("| engine | median ms | min ms |\n|---|---|---|")
    for name, run in (("ours", ours), ("llguidance", guidance)):
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            run()
            times.append(time.perf_counter() - started)
        print(f"| {name} | {statistics.median(times) * 1e3:.1f} | {min(times) * 1e3:.1f} |")


def _table() -> Any:
    path = Path(__file__).resolve().parents[1] / "tests" / "test_e2e" / "pydantic_table.py"
    spec = importlib.util.spec_from_file_location("pydantic_table", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module.MODEL_CASES


def coverage(model: Model, decoder: Decoder, tokenizer: LLTokenizer, budget: int) -> None:
    print(f"\n## coverage of the pydantic table (greedy, budget {budget})\n")
    print("| model | ours | llguidance |\n|---|---|---|")
    totals = {"ours": [0, 0], "llguidance": [0, 0]}
    for case in _table():
        schema = case.model.model_json_schema()
        prompt = model.tokenize(chatml(case.prompt), add_bos=True)
        cells = []
        for name, make in (
            ("ours", lambda s=schema: Ours(model, decoder, s)),
            ("llguidance", lambda s=schema: Guidance(model, decoder, tokenizer, s)),
        ):
            try:
                engine = make()
            except (LLMError, ValueError) as refused:
                cells.append(f"refused ({str(refused)[:60]})")
                continue
            totals[name][0] += 1
            text, steps, _ = generate(model, decoder, engine, prompt, budget)
            try:
                case.model.model_validate(json.loads(text))
                totals[name][1] += 1
                cells.append("valid")
            except ValueError as error:
                why = "cut at the budget, unclosed" if len(steps) >= budget else type(error).__name__
                cells.append(f"taken; reply invalid ({why}: …{text[-24:]!r})")
        print(f"| {case.id} | {cells[0]} | {cells[1]} |")
    count = len(_table())
    for name, (taken, valid) in totals.items():
        print(f"{name}: takes {taken}/{count}, valid replies {valid}/{count}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--threads", type=int, default=1)  # two threads on shared cores wait for each other
    parser.add_argument("--tokens", type=int, default=96)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--budget", type=int, default=200)
    parser.add_argument("--only", choices=("timing", "coverage"), help="one part (default: both)")
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores (timings need an idle machine)")
    config = ModelConfig(n_ctx=CTX, n_threads=args.threads)
    model = Model(config)
    decoder = Decoder(new_single_context(model, config, size=CTX, batch=256))
    started = time.perf_counter()
    tokenizer = lltokenizer_from_vocab(model.vocab, eos_token=[model.eos])
    print(
        f"llguidance tokenizer from the GGUF vocabulary: {(time.perf_counter() - started) * 1e3:.0f} ms (once per model)"
    )
    try:
        if args.only != "coverage":
            per_token(model, decoder, tokenizer, args.tokens, args.repeats)
            compile_times(model, tokenizer, max(args.repeats, 5))
        if args.only != "timing":
            coverage(model, decoder, tokenizer, args.budget)
    finally:
        decoder.close()
        model.close()


if __name__ == "__main__":
    main()
