"""Time to first token when many clients arrive at once, measured with a client that is not the
bottleneck: `asgi-llm serve` beside llama.cpp's `llama-server` (same vendored llama.cpp, model,
sequences and threads).

    .venv/bin/python benchmarks/arrivals.py [--model GGUF] [--clients 128] [--requests 2]
        [--tokens 128] [--rounds 3] [--threads T] [--client raw|httpx|both] [--cache DIR]

C clients send R streamed chat completions each, back to back (so the second wave arrives as the
first ends), greedy, `max_tokens` N with every end token banned. Two clients:
- `raw`: asyncio streams, one kept-alive connection per client, reading the chunked SSE bytes
  with next to no Python per chunk;
- `httpx`: one `httpx.AsyncClient` shared by every client, as `gpu.py` and `anchors.py` use,
  with a new connection per request (`_server.shared_pool_limits`: httpcore 1.0's pool churns
  when many kept-alive clients send at once, and held some 120 second requests 0.5–5.6 s before
  they left the client; llama-server closes a connection after each stream without saying so
  (no `Connection: close`), and a request on such a connection failed with `httpx.ReadError`).
Prints per server and client TTFT p50 / p95 / max and aggregate tokens/s (median over rounds).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

import httpx
from _server import ChildServer, asgi_llm_serve, shared_pool_limits
from anchors import MODEL_ID, add_model_arguments, build, end_token_bias, model_path, p, serve_options, theirs


def body(n: int, tokens: int, bias: dict[str, float]) -> dict[str, Any]:
    messages = [{"role": "user", "content": f"Client {n} asks for a short story about the sea."}]
    return {"model": MODEL_ID, "messages": messages, "max_tokens": tokens, "temperature": 0,
            "logit_bias": bias, "stream": True}  # fmt: skip


class _Connection:
    """One client's kept-alive connection, opened again when the server closed it after a response
    (llama-server does after a stream), as any HTTP client does: the reconnect counts in the time."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def request(self, data: bytes) -> float:
        """One request: seconds to the first content chunk."""
        head = (f"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1:{self.port}\r\n"
                f"content-type: application/json\r\ncontent-length: {len(data)}\r\n\r\n").encode()  # fmt: skip
        started, first = time.perf_counter(), 0.0
        for attempt in range(2):
            if self.streams is None:
                self.streams = await asyncio.open_connection("127.0.0.1", self.port)
            reader, writer = self.streams
            writer.write(head + data)
            await writer.drain()
            status = await reader.readline()
            if status or attempt:
                break
            writer.close()
            self.streams = None
        assert b" 200 " in status, status
        headers = {}
        while (line := await reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip().lower()
        assert headers.get("transfer-encoding") == "chunked", headers
        while size := int((await reader.readline()).split(b";")[0], 16):
            chunk = await reader.readexactly(size + 2)
            if not first and b'"content":"' in chunk:
                first = time.perf_counter() - started
        await reader.readline()  # the last chunk's blank line
        if headers.get("connection") == "close":
            writer.close()
            self.streams = None
        return first

    def close(self) -> None:
        if self.streams is not None:
            self.streams[1].close()


async def raw_clients(port: int, clients: int, requests: int, tokens: int, bias: dict[str, float]) -> list[float]:
    async def client(n: int) -> list[float]:
        connection = _Connection(port)
        try:
            data = json.dumps(body(n, tokens, bias)).encode()
            return [await connection.request(data) for _ in range(requests)]
        finally:
            connection.close()

    return [t for ts in await asyncio.gather(*(client(n) for n in range(clients))) for t in ts]


async def httpx_clients(url: str, clients: int, requests: int, tokens: int, bias: dict[str, float]) -> list[float]:
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=shared_pool_limits(clients)) as shared:

        async def one(n: int) -> float:
            started, first = time.perf_counter(), 0.0
            async with shared.stream("POST", "/v1/chat/completions", json=body(n, tokens, bias)) as response:
                response.raise_for_status()
                async for line in response.aiter_lines():
                    if not first and line.startswith("data: {") and '"content":"' in line:
                        first = time.perf_counter() - started
            return first

        async def client(n: int) -> list[float]:
            return [await one(n) for _ in range(requests)]

        return [t for ts in await asyncio.gather(*(client(n) for n in range(clients))) for t in ts]


def measure(server: ChildServer, kind: str, args: argparse.Namespace, bias: dict[str, float]) -> dict[str, float]:
    started = time.perf_counter()
    if kind == "raw":
        ttfts = asyncio.run(raw_clients(server.port, args.clients, args.requests, args.tokens, bias))
    else:
        ttfts = asyncio.run(httpx_clients(server.url, args.clients, args.requests, args.tokens, bias))
    wall = time.perf_counter() - started
    return {"p50": p(ttfts, 0.5), "p95": p(ttfts, 0.95), "max": max(ttfts),
            "tokens/s": args.clients * args.requests * args.tokens / wall}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=128)
    parser.add_argument("--requests", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--client", choices=["raw", "httpx", "both"], default="both")
    add_model_arguments(parser)
    args = parser.parse_args()
    args.model = model_path(args)
    server_bin, _ = build(args.cache)
    bias = end_token_bias(args.model)
    options = serve_options(args.model, args.threads, args.clients)
    servers = {
        "asgi-llm serve": lambda: ChildServer("", {}, command=asgi_llm_serve(*options)),
        "llama-server": lambda: theirs(server_bin, args.model, args.threads, args.clients),
    }
    kinds = ["raw", "httpx"] if args.client == "both" else [args.client]
    figures: dict[tuple[str, str], list[dict[str, float]]] = {(s, k): [] for s in servers for k in kinds}
    print(f"{args.clients} clients x {args.requests} streams of {args.tokens} tokens, {Path(args.model).name}, "
          f"{args.threads} threads, {args.rounds} rounds", flush=True)  # fmt: skip
    for rnd in range(args.rounds):
        for name in servers if rnd % 2 == 0 else reversed(list(servers)):
            with servers[name]() as server:
                for kind in kinds:
                    asyncio.run(raw_clients(server.port, 1, 1, 4, bias))  # warm-up
                    figures[(name, kind)].append(measure(server, kind, args, bias))
                    print(f"  round {rnd + 1}: {name}, {kind}: {figures[(name, kind)][-1]}", flush=True)
    print(f"{'server':<16}{'client':<8}{'TTFT p50 ms':>12}{'p95 ms':>9}{'max ms':>9}{'tokens/s':>10}")
    for (name, kind), rows in figures.items():
        med = {key: statistics.median(r[key] for r in rows) for key in rows[0]}
        print(f"{name:<16}{kind:<8}{med['p50'] * 1000:>12.0f}{med['p95'] * 1000:>9.0f}{med['max'] * 1000:>9.0f}"
              f"{med['tokens/s']:>10.0f}")  # fmt: skip


if __name__ == "__main__":
    main()
