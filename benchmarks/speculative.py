"""Speculative decoding, ours beside llama.cpp's `llama-server` (same vendored build, same model,
threads and positions), on the workloads where drafts from the prompt pay and on those where
they must not cost.

    .venv/bin/python benchmarks/speculative.py [--threads T] [--tokens N] [--rounds R]
        [--modes ngram-simple,ngram-mod,ngram-map-k] [--cache DIR] [--model GGUF] [--workloads W,...]

Servers: `asgi-llm serve` with `--speculative off`, `ngram` (each sequence's own prompt and
output only: `--speculative-memory 0`) and `ngram+memory` (with the memory of past replies);
llama-server with no speculation and with each `--spec-type` of `--modes` (its n-gram modes; the
best per workload is its figure). Each serves 4 sequences of 2048 positions. Every round repeats
one request, whose greedy reply is the same each time: so `ngram+memory` drafts every round
after the warm-up from the reply before, as does llama-server's `ngram-mod`, whose table is
shared across requests too. `ngram` and the other modes see each request afresh.

Workloads, each a greedy streamed chat completion of up to N tokens (end tokens allowed: both
servers write the same text, checked):
- `code edit`: the prompt holds a ~300-token function; the reply rewrites it with one change;
- `quote`: a long passage, and the request to quote one paragraph of it;
- `free chat`: a story, nothing to copy;
- `structured`: the person schema and prompt of constrained_decoding.py as `response_format`
  (json_schema), over HTTP on both servers;
- `free chat x4`: four clients at once (aggregate tokens/s).
Per workload every server runs at once and they take turns, the order reversed every other round,
so that the machine's speed, which drifts over minutes on a shared host, falls on all alike (one
server after another had made the later ones look slower). The figure is tokens/s from the request to its last chunk (the prompt is cached by the warm-up,
so that is one decode and the HTTP round trip more than the reply's decodes), the median over
rounds (one client), or all tokens over the wall time (four clients). Not from the first chunk:
llama-server's chat parser holds a reply's first tokens when they may begin a JSON tool call
(`{`: about 5 tokens on the structured workload), and that would count them as free. Acceptance: ours from
`/metrics` (accepted / drafted over the workload), llama-server's from the `timings` of its
last chunk (`draft_n_accepted` / `draft_n`), where it reports them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import re
import statistics
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, ExitStack
from pathlib import Path
from typing import Any

import httpx
from _server import ChildServer, asgi_llm_serve, shared_pool_limits
from anchors import build
from constrained_decoding import PROMPT as PERSON_PROMPT
from constrained_decoding import SCHEMA

MODEL_ID = "bench"
N_CTX = 2048
PARALLEL = 4

FUNCTION = '''def summarize_orders(orders, currency="EUR", include_tax=True):
    """Totals per customer, with the largest order of each."""
    totals = {}
    largest = {}
    for order in orders:
        customer = order["customer"]
        amount = order["amount"]
        if include_tax:
            amount = amount * (1 + order.get("tax_rate", 0.2))
        if order.get("currency", currency) != currency:
            amount = convert(amount, order["currency"], currency)
        totals[customer] = totals.get(customer, 0) + amount
        if customer not in largest or amount > largest[customer]["amount"]:
            largest[customer] = {"id": order["id"], "amount": amount}
    report = []
    for customer, total in sorted(totals.items(), key=lambda item: -item[1]):
        report.append({
            "customer": customer,
            "total": round(total, 2),
            "largest_order": largest[customer]["id"],
            "currency": currency,
        })
    return report
'''
PASSAGE = (
    "The lighthouse stood on a rock a mile from the shore, and for forty years the same family kept its lamp. "
    "Every evening the keeper climbed the one hundred and twelve steps, trimmed the wick and wound the clockwork "
    "that turned the lens.\n\n"
    "In the winter of the great storm the supply boat could not reach the rock for six weeks. The keeper's "
    "daughter rationed the oil by the spoonful, and the light never failed, though the waves broke over the "
    "gallery and the glass of the lantern cracked twice.\n\n"
    "When the electric lamp came, the family stayed on as caretakers. The old lens was taken to the museum in "
    "the town, where it still turns every evening at dusk, for the children who come to watch it."
)
WORKLOADS: dict[str, dict[str, Any]] = {
    "code edit": {
        "messages": [
            {
                "role": "user",
                "content": "Rename the parameter `include_tax` to `with_tax` in this function. Reply with the whole "
                f"function and nothing else.\n\n```python\n{FUNCTION}```",
            }
        ]
    },
    "quote": {
        "messages": [
            {
                "role": "user",
                "content": f"{PASSAGE}\n\nQuote the second paragraph of the text above exactly, word for word.",
            }
        ]
    },
    "free chat": {"messages": [{"role": "user", "content": "Write a short story about a robot who learns to paint."}]},
    "structured": {
        "messages": [
            {
                "role": "user",
                "content": PERSON_PROMPT,
            }
        ],
        "response_format": {"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA}},
    },
}


OURS = {"off": ("off", None), "ngram": ("ngram", 0), "ngram+memory": ("ngram", 65536)}
"""Our modes: `speculative`, and `speculative_memory` (the runs of past replies remembered; `ngram` only)."""


def ours(model: str, threads: int, mode: str) -> ChildServer:
    speculative, memory = OURS[mode]
    options = ["--model", model, "--model-id", MODEL_ID, "--threads", str(threads), "--n-ctx", str(N_CTX)]
    options += ["--parallel", str(PARALLEL), "--flash-attn", "on", "--no-web-ui", "--speculative", speculative]
    if memory is not None:
        options += ["--speculative-memory", str(memory)]
    return ChildServer("", {}, command=asgi_llm_serve(*options))


def theirs(binary: Path, model: str, threads: int, mode: str) -> ChildServer:
    def command(port: int) -> list[str]:
        line = [str(binary), "-m", model, "--alias", MODEL_ID, "--host", "127.0.0.1", "--port", str(port)]
        line += ["-t", str(threads), "-tb", str(threads), "-c", str(N_CTX * PARALLEL), "-np", str(PARALLEL)]
        line += ["--no-kv-unified", "-fa", "on", "--no-webui", "--jinja"]
        return line + (["--spec-type", mode] if mode != "none" else [])

    return ChildServer("", {}, health="/health", command=command)


async def one(client: httpx.AsyncClient, workload: str, tokens: int) -> tuple[int, float, str, dict[str, Any]]:
    """Tokens, tokens/s from the request to the last chunk, the text, and the last chunk's
    `timings` (llama-server's)."""
    body = {**WORKLOADS[workload], "model": MODEL_ID, "max_tokens": tokens, "temperature": 0, "stream": True}
    body["stream_options"] = {"include_usage": True}
    times: list[float] = []
    text: list[str] = []
    usage, timings = 0, {}
    started = time.perf_counter()
    async with client.stream("POST", "/v1/chat/completions", json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            timings = chunk.get("timings") or timings
            if chunk.get("usage"):
                usage = chunk["usage"]["completion_tokens"]
            piece = ((chunk.get("choices") or [{}])[0].get("delta") or {}).get("content")
            if piece:
                times.append(time.perf_counter())
                text.append(piece)
    span = times[-1] - started if times else 0.0
    return usage, usage / span if span > 0 else float("nan"), "".join(text), timings


async def tally(client: httpx.AsyncClient) -> tuple[float, float]:
    """Ours: drafted and accepted tokens so far, from /metrics."""
    text = (await client.get("/metrics")).text
    found = {
        name: float(value)
        for name, value in re.findall(
            r"^asgi_llm_speculative_(drafted|accepted)_tokens_total\{[^}]*\} (\S+)$", text, re.MULTILINE
        )
    }
    return found.get("drafted", 0.0), found.get("accepted", 0.0)


Figure = tuple[float, float | None, str]  # tokens/s, the acceptance rate (None where unknown), the last reply
Maker = Callable[[], AbstractContextManager[ChildServer]]
FAILED: Figure = (float("nan"), None, "")


async def interleaved(
    servers: dict[str, ChildServer], workload: str, tokens: int, rounds: int, clients: int
) -> dict[str, Figure]:
    """Each server's figure, their rounds taken in turn (the order reversed every other round), so
    that the machine's drift over minutes falls on all of them alike."""
    # a connection per request: llama-server closes its connection after each stream without saying
    # so (no `Connection: close`), and a kept-alive pool would send the next request down a dead one
    connections = {
        name: httpx.AsyncClient(base_url=server.url, timeout=600, limits=shared_pool_limits(clients))
        for name, server in servers.items()
    }
    rates: dict[str, list[float]] = {name: [] for name in servers}
    texts = dict.fromkeys(servers, "")
    drafts = {name: [0.0, 0.0] for name in servers}  # drafted, accepted
    failed: set[str] = set()
    try:
        for name, client in connections.items():
            try:
                await one(client, workload, tokens)  # warm-up: the prompt is cached alike on every side after it
            except httpx.HTTPError as exc:
                print(f"{workload}: {name} failed: {exc!r}")
                failed.add(name)
            else:
                if name.startswith("ours"):
                    drafts[name] = [-x for x in await tally(client)]
        for round_ in range(rounds):
            for name in list(connections) if round_ % 2 == 0 else list(reversed(connections)):
                if name in failed:
                    continue
                try:
                    rate, text, timings = await _round(connections[name], workload, tokens, clients)
                except httpx.HTTPError as exc:
                    print(f"{workload}: {name} failed: {exc!r}")
                    failed.add(name)
                    continue
                rates[name].append(rate)
                texts[name] = text
                drafts[name][0] += timings.get("draft_n", 0)
                drafts[name][1] += timings.get("draft_n_accepted", 0)
        for name, client in connections.items():
            if name.startswith("ours") and name not in failed:
                drafted, accepted = await tally(client)
                drafts[name] = [drafts[name][0] + drafted, drafts[name][1] + accepted]
    finally:
        for client in connections.values():
            await client.aclose()
    return {
        name: FAILED
        if name in failed or not rates[name]
        else (
            statistics.median(rates[name]),
            drafts[name][1] / drafts[name][0] if drafts[name][0] else None,
            texts[name],
        )
        for name in servers
    }


async def _round(
    client: httpx.AsyncClient, workload: str, tokens: int, clients: int
) -> tuple[float, str, dict[str, Any]]:
    """One round's tokens/s, the reply, and llama-server's `timings` (one client)."""
    if clients == 1:
        _, rate, text, timings = await one(client, workload, tokens)
        return rate, text, timings
    started = time.perf_counter()
    results = await asyncio.gather(*(one(client, workload, tokens) for _ in range(clients)))
    return sum(r[0] for r in results) / (time.perf_counter() - started), results[-1][2], {}


def run_workload(makers: dict[str, Maker], workload: str, tokens: int, rounds: int, clients: int) -> dict[str, Figure]:
    """Every server up at once (a fresh set per workload: a crash costs one row), taking turns."""
    with ExitStack() as stack:
        servers = {}
        for name, make in makers.items():
            try:
                servers[name] = stack.enter_context(make())
            except (httpx.HTTPError, RuntimeError) as exc:
                print(f"{workload}: {name} did not start: {exc!r}")
        figures = asyncio.run(interleaved(servers, workload, tokens, rounds, clients))
    return {name: figures.get(name, FAILED) for name in makers}


def _finite(rate: float) -> float:
    return rate if math.isfinite(rate) else -1.0  # NaN (a failed run) never wins


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--modes", default="ngram-simple,ngram-mod,ngram-map-k")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "asgi_llm_bench")
    parser.add_argument("--model", default=None)
    parser.add_argument("--workloads", default=",".join([*WORKLOADS, "free chat x4"]), help="a comma-separated subset")
    args = parser.parse_args()
    only = set(args.workloads.split(","))
    from asgi_llm.config import default_model_path

    model = args.model or default_model_path()
    server_bin, _ = build(args.cache)
    makers: dict[str, Maker] = {f"ours {mode}": (lambda m=mode: ours(model, args.threads, m)) for mode in OURS}
    for mode in ("none", *args.modes.split(",")):
        makers[f"llama-server {mode}"] = lambda m=mode: theirs(server_bin, model, args.threads, m)
    plan = [(workload, workload, 1) for workload in WORKLOADS] + [("free chat x4", "free chat", 4)]
    runs: dict[str, dict[str, Figure]] = {name: {} for name in makers}
    for name, workload, clients in [p for p in plan if p[0] in only]:
        for server, figure in run_workload(makers, workload, args.tokens, args.rounds, clients).items():
            runs[server][name] = figure
    print(f"\n{args.threads} threads, {args.tokens} tokens, median of {args.rounds}; tokens/s (acceptance)\n")
    names = list(runs)
    ratios = "ours ngram / ours off | ngram+memory / ours off | ours ngram / best llama-server | ngram+memory / best"
    print("| workload | " + " | ".join(names) + f" | {ratios} |")
    print("|---|" + "---|" * (len(names) + 4))
    for workload in runs["ours off"]:
        cells = []
        for name in names:
            rate, accepted, _ = runs[name][workload]
            cells.append(f"{rate:.1f}" + (f" ({accepted:.0%})" if accepted is not None else ""))
        best = max((runs[name][workload][0] for name in names if name.startswith("llama-server")), key=_finite)
        off = runs["ours off"][workload][0]
        mine = [runs[name][workload][0] for name in ("ours ngram", "ours ngram+memory")]
        figures = [*(rate / off for rate in mine), *(rate / best for rate in mine)]
        print(f"| {workload} | " + " | ".join(cells) + "".join(f" | {x:.2f}×" for x in figures) + " |")
    for workload in runs["ours off"]:
        texts = {name: runs[name][workload][2] for name in names}
        if len(set(texts.values())) > 1 and not workload.endswith("x4"):
            differing = [name for name in names if texts[name] != texts["ours off"]]
            print(f"note: {workload}: the text differs from ours off for {', '.join(differing)}")


if __name__ == "__main__":
    main()
