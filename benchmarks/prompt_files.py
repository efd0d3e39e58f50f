"""The first request after a restart, with a long shared system prompt: read afresh (cold) against
restored from the prompt saved on disk by the server's previous run (warm, `prompt_cache_dir`).

    .venv/bin/python benchmarks/prompt_files.py [--system-tokens 2000] [--rounds 3] [--threads T]
        [--model GGUF]

Each round, each side in a fresh `asgi-llm serve` process (one sequence, `n_ctx` 4096):
- cold: an empty `prompt_cache_dir`; the first request (system prompt + a question) is timed.
- warm: a first server answers one request with the same system prompt and another question,
  and stops (its saved prompt is written by then); a second server over the same directory is
  started and its first request (the timed question) is timed.
Prints per side time to first token (median over rounds), the prompt and cached tokens the
server reports, the ratio cold / warm, and the saved files' size. The same greedy question
gets the same reply on both sides, which is checked.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from _server import ChildServer, asgi_llm_serve
from anchors import MODEL_ID, add_model_arguments, chat_chunks, content, model_path

WORDS = ("red", "green", "amber", "blue", "white", "violet", "grey", "gold", "black", "silver", "copper", "teal")


def system_prompt(tokens: int) -> str:
    """About `tokens` tokens of rules (SmolLM2's tokenizer: about 21 tokens a rule)."""
    rules = (
        f"Rule {n}: the {WORDS[n % len(WORDS)]} lantern of station {n} stays lit from dusk until the "
        f"{WORDS[(n * 7) % len(WORDS)]} flag is lowered."
        for n in range(max(1, tokens // 21))
    )
    return "You keep the lantern rules of the harbour.\n" + "\n".join(rules)


async def first_reply(url: str, system: str, question: str) -> dict[str, Any]:
    body = {
        "model": MODEL_ID,
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": question}],
        "max_tokens": 8,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    started, first, reply, usage = time.perf_counter(), 0.0, [], {}
    async with httpx.AsyncClient(base_url=url, timeout=600) as client:
        async for chunk in chat_chunks(client, body):
            usage = chunk.get("usage") or usage
            if text := content(chunk):
                first = first or time.perf_counter() - started
                reply.append(text)
    details = usage.get("prompt_tokens_details") or {}
    return {"ttft": first, "prompt": usage.get("prompt_tokens", 0), "cached": details.get("cached_tokens") or 0,
            "reply": "".join(reply)}  # fmt: skip


def server(args: argparse.Namespace, directory: Path) -> ChildServer:
    options = ["--model", args.model, "--model-id", MODEL_ID, "--threads", str(args.threads), "--n-ctx", "4096",
               "--parallel", "1", "--no-web-ui", "--prompt-cache-dir", str(directory)]  # fmt: skip
    return ChildServer("", {}, command=asgi_llm_serve(*options))


def one_round(args: argparse.Namespace, system: str) -> dict[str, dict[str, Any]]:
    timed = "Which lantern is at station 12, and when does it go dark?"
    with tempfile.TemporaryDirectory() as tmp:
        cold_dir, warm_dir = Path(tmp) / "cold", Path(tmp) / "warm"
        with server(args, cold_dir) as cold:
            cold_reply = asyncio.run(first_reply(cold.url, system, timed))
        with server(args, warm_dir) as before:
            asyncio.run(first_reply(before.url, system, "How many stations are there?"))
        with server(args, warm_dir) as warm:
            warm_reply = asyncio.run(first_reply(warm.url, system, timed))
        saved = sum(f.stat().st_size for f in warm_dir.rglob("*.prompt"))
    assert cold_reply["reply"] == warm_reply["reply"], (cold_reply["reply"], warm_reply["reply"])
    return {"cold": cold_reply, "warm": {**warm_reply, "saved": saved}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--system-tokens", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    add_model_arguments(parser)
    args = parser.parse_args()
    args.model = model_path(args)
    system = system_prompt(args.system_tokens)
    rounds = []
    for n in range(args.rounds):
        rounds.append(one_round(args, system))
        print(f"  round {n + 1}/{args.rounds}: cold {rounds[-1]['cold']['ttft'] * 1000:.0f} ms, "
              f"warm {rounds[-1]['warm']['ttft'] * 1000:.0f} ms", flush=True)  # fmt: skip
    print(f"first request after a restart, {args.threads} threads, median of {args.rounds} rounds")
    print(f"{'side':<8}{'TTFT ms':>10}{'prompt':>8}{'cached':>8}")
    medians = {}
    for side in ("cold", "warm"):
        medians[side] = statistics.median(r[side]["ttft"] for r in rounds)
        last = rounds[-1][side]
        print(f"{side:<8}{medians[side] * 1000:>10.0f}{last['prompt']:>8}{last['cached']:>8}")
    print(f"cold / warm: {medians['cold'] / medians['warm']:.1f}x; "
          f"saved on disk: {rounds[-1]['warm']['saved'] / 2**20:.1f} MiB")  # fmt: skip


if __name__ == "__main__":
    main()
