"""More conversations than sequences: each turn of a chat whose sequence another conversation took
meanwhile, with and without our host-memory prompt cache, and on llama.cpp's own server.

    .venv/bin/python benchmarks/conversations.py [--conversations 12] [--parallel 4] [--turns 4]
        [--tokens 32] [--rounds 2] [--threads T] [--cache DIR]

N conversations (clients) take T turns each at once against a server of P sequences (N > P): a
turn sends the whole conversation so far (system prompt, each earlier question and reply) plus a
new question, greedy, with `max_tokens` R and every end token banned, so every reply is R tokens.
Sides, each in its own process and in alternating order per round: `asgi-llm serve` as anchors.py
starts it (the prompt cache at its default), the same with `prompt_cache_mib = 0`, and llama.cpp's
`llama-server` as anchors.py builds and starts it (its own host-memory prompt cache at its default,
`--cache-ram 8192`). Prints per side the round's wall time, aggregate completion tokens/s and time
to first token p50/p95 of the later turns (median over rounds), and the share of the later turns'
prompt tokens each server reports served from its caches (`usage.prompt_tokens_details.cached_tokens`).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
from _server import ChildServer, asgi_llm_serve
from anchors import (
    MODEL_ID,
    add_model_arguments,
    build,
    chat_chunks,
    content,
    end_token_bias,
    model_path,
    p,
    retried,
    serve_options,
    theirs,
)

TOPICS = ("lighthouses", "bees", "volcanoes", "trains", "the moon", "bread", "rivers", "chess",
          "owls", "glaciers", "violins", "deserts", "coral", "kites", "caves", "comets")  # fmt: skip


async def turn(
    client: httpx.AsyncClient, messages: list[dict[str, str]], tokens: int, bias: dict[str, float]
) -> tuple[str, float, int, int]:
    return await retried(lambda: _turn(client, messages, tokens, bias))


async def _turn(
    client: httpx.AsyncClient, messages: list[dict[str, str]], tokens: int, bias: dict[str, float]
) -> tuple[str, float, int, int]:
    """One streamed turn: the reply, seconds to its first content, prompt and cached tokens."""
    body = {"model": MODEL_ID, "messages": messages, "max_tokens": tokens, "temperature": 0, "logit_bias": bias,
            "stream": True, "stream_options": {"include_usage": True}}  # fmt: skip
    started, first, reply, usage = time.perf_counter(), 0.0, [], {}
    async for chunk in chat_chunks(client, body):
        usage = chunk.get("usage") or usage
        if text := content(chunk):
            first = first or time.perf_counter() - started
            reply.append(text)
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    return "".join(reply), first, int(usage.get("prompt_tokens", 0)), int(cached)


async def conversations(url: str, args: argparse.Namespace, bias: dict[str, float]) -> dict[str, float]:
    later: list[tuple[float, int, int]] = []  # TTFT, prompt tokens, cached tokens of turns after the first

    async def talk(client: httpx.AsyncClient, n: int) -> None:
        messages = [{"role": "system", "content": "You are a patient teacher who answers in plain words."}]
        for t in range(args.turns):
            messages.append({"role": "user", "content": f"Tell me something new about {TOPICS[n % len(TOPICS)]} ({t + 1})."})
            reply, ttft, prompt, cached = await turn(client, messages, args.tokens, bias)
            messages.append({"role": "assistant", "content": reply})
            if t:
                later.append((ttft, prompt, cached))

    limits = httpx.Limits(max_connections=args.conversations)
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as client:
        started = time.perf_counter()
        await asyncio.gather(*(talk(client, n) for n in range(args.conversations)))
        wall = time.perf_counter() - started
    ttfts = [x[0] for x in later]
    return {
        "wall": wall,
        "tokens/s": args.conversations * args.turns * args.tokens / wall,
        "ttft p50": p(ttfts, 0.5),
        "ttft p95": p(ttfts, 0.95),
        "cached": sum(x[2] for x in later) / max(sum(x[1] for x in later), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=12)
    parser.add_argument("--parallel", type=int, default=4)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    add_model_arguments(parser)
    args = parser.parse_args()
    args.model = model_path(args)
    server_bin, _ = build(args.cache)
    bias = end_token_bias(args.model)
    with tempfile.TemporaryDirectory() as tmp:
        no_cache = Path(tmp) / "no-cache.toml"
        no_cache.write_text("[[models]]\nprompt_cache_mib = 0\n")
        options = serve_options(args.model, args.threads, args.parallel)
        sides = {
            "asgi-llm serve": lambda: ChildServer("", {}, command=asgi_llm_serve(*options)),
            "same, prompt_cache_mib = 0": lambda: ChildServer(
                "", {}, command=asgi_llm_serve("--config", str(no_cache), *options)
            ),
            "llama-server": lambda: theirs(server_bin, args.model, args.threads, args.parallel),
        }
        figures: dict[str, list[dict[str, float]]] = {side: [] for side in sides}
        print(f"{args.conversations} conversations x {args.turns} turns of {args.tokens} tokens on {args.parallel} "
              f"sequences, {args.threads} threads", flush=True)  # fmt: skip
        for rnd in range(args.rounds):
            order = list(sides) if rnd % 2 == 0 else list(reversed(sides))
            for side in order:
                print(f"  {side}", flush=True)
                with sides[side]() as server:  # a fresh server each round: nothing cached from the last
                    figures[side].append(asyncio.run(conversations(server.url, args, bias)))
            print(f"  round {rnd + 1}/{args.rounds} done", flush=True)
    print(f"{'side':<28}{'wall s':>8}{'tokens/s':>10}{'TTFT p50 ms':>13}{'TTFT p95 ms':>13}{'cached':>8}")
    for side, rounds in figures.items():
        med = {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
        cached = f"{med['cached']:.0%}" if any(r["cached"] for r in rounds) else "—"  # not every server says
        print(f"{side:<28}{med['wall']:>8.1f}{med['tokens/s']:>10.1f}{med['ttft p50'] * 1000:>13.0f}"
              f"{med['ttft p95'] * 1000:>13.0f}{cached:>8}")  # fmt: skip
    sys.stdout.flush()


if __name__ == "__main__":
    main()
