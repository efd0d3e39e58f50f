"""A burst of streamed requests far beyond `parallel`: how long each client waits for its first
byte, its first token, and how each ends (finished, or the queue timeout's error event).

    .venv/bin/python benchmarks/queue_burst.py [--requests 64] [--tokens 256] [--protocol openai|ollama]
        [--queue-timeout S] [--threads T]

Starts `asgi-llm serve` (packaged model, queue limits at their defaults unless --queue-timeout)
in a child process and sends `--requests` streamed chat requests at once, each for `--tokens`
tokens (the end-of-turn tokens banned, so each runs its full length). Prints, over all clients,
the time to the first byte of the body (`: queued` comment or first chunk), to the response
headers (what an Ollama client sees first: NDJSON has no keep-alive line), to the first token,
and how many finished, ended with the timeout's error event, or failed otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _server import ChildServer, asgi_llm_serve, cpu_busy

USER = [{"role": "user", "content": "Write a very long story about the sea."}]
KEEP_TALKING = {"0": -100, "2": -100}  # the packaged model's end-of-turn tokens


@dataclass
class Client:
    headers: float = 0.0
    first_byte: float | None = None
    first_token: float | None = None
    end: float = 0.0
    outcome: str = "failed"
    chunks: int = 0
    notes: list[str] = field(default_factory=list)


def request(protocol: str, tokens: int) -> tuple[str, dict[str, object]]:
    if protocol == "ollama":
        options = {"num_predict": tokens, "temperature": 0}
        return "/api/chat", {"model": "default", "messages": USER, "options": options, "logit_bias": KEEP_TALKING}
    body = {"model": "default", "messages": USER, "max_tokens": tokens, "stream": True, "logit_bias": KEEP_TALKING}
    return "/v1/chat/completions", body


async def one(client: httpx.AsyncClient, protocol: str, tokens: int, started: float) -> Client:
    path, body = request(protocol, tokens)
    if protocol == "ollama":
        body.pop("logit_bias")  # Ollama has no logit_bias; its runs may end early
    seen = Client()
    async with client.stream("POST", path, json=body) as response:
        seen.headers = time.perf_counter() - started
        if response.status_code != 200:
            seen.outcome = f"status {response.status_code}"
            seen.end = time.perf_counter() - started
            return seen
        async for line in response.aiter_lines():
            now = time.perf_counter() - started
            if seen.first_byte is None:
                seen.first_byte = now
            payload = line.removeprefix("data: ")
            if not payload or payload.startswith(":") or payload == "[DONE]":
                continue
            data = json.loads(payload)
            if "error" in data:
                seen.outcome = "timed out" if "waited" in json.dumps(data["error"]) else "error"
                break
            seen.chunks += 1
            if seen.first_token is None:
                seen.first_token = now
            finished = data.get("done") if protocol == "ollama" else any(c.get("finish_reason") for c in data["choices"])
            if finished:
                seen.outcome = "finished"
    seen.end = time.perf_counter() - started
    return seen


def show(label: str, values: list[float]) -> None:
    if not values:
        print(f"  {label:<24} (none)")
        return
    values = sorted(values)
    p95 = values[min(len(values) - 1, int(len(values) * 0.95))]
    print(f"  {label:<24} p50 {statistics.median(values):7.2f} s   p95 {p95:7.2f} s   max {values[-1]:7.2f} s")


async def burst(url: str, args: argparse.Namespace) -> None:
    limits = httpx.Limits(max_connections=args.requests + 4)
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as client:
        started = time.perf_counter()
        clients = await asyncio.gather(*(one(client, args.protocol, args.tokens, started) for _ in range(args.requests)))
    print(f"{args.requests} streamed {args.protocol} requests of {args.tokens} tokens at once:")
    show("response headers", [c.headers for c in clients])
    show("first byte of body", [c.first_byte for c in clients if c.first_byte is not None])
    show("first token", [c.first_token for c in clients if c.first_token is not None])
    show("end", [c.end for c in clients])
    waits = [c.first_byte if c.first_byte is not None else c.end for c in clients]
    print(f"  clients with no byte for over 10 s (headers aside): {sum(w > 10 for w in waits)}")
    print(f"  clients with no headers for over 10 s: {sum(c.headers > 10 for c in clients)}")
    outcomes: dict[str, int] = {}
    for c in clients:
        outcomes[c.outcome] = outcomes.get(c.outcome, 0) + 1
    print("  outcomes: " + ", ".join(f"{n} {k}" for k, n in sorted(outcomes.items())))
    tokens = sum(c.chunks for c in clients)
    print(f"  streamed chunks {tokens}, aggregate {tokens / max(c.end for c in clients):.0f} chunks/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--protocol", choices=["openai", "ollama"], default="openai")
    parser.add_argument("--queue-timeout", type=float, help="the model's queue_timeout (default: the setting's)")
    parser.add_argument("--threads", type=int, help="llama.cpp threads (default: the setting's)")
    args = parser.parse_args()
    busy = cpu_busy()
    print(f"CPU busy before start: {busy:.0%}" if busy is not None else "CPU load unknown")
    options = ["--threads", str(args.threads)] if args.threads else []
    with tempfile.TemporaryDirectory() as folder:
        if args.queue_timeout is not None:
            config = Path(folder) / "queue_burst.json"
            config.write_text(json.dumps({"models": [{"aliases": ["default"], "queue_timeout": args.queue_timeout}]}))
            options += ["--config", str(config)]
        with ChildServer("", {}, command=asgi_llm_serve(*options)) as server:
            asyncio.run(burst(server.url, args))


if __name__ == "__main__":
    main()
