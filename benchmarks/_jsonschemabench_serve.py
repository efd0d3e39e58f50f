"""JSONSchemaBench, part 3: a seeded sample of schemas through a real `asgi-llm serve`.

Each schema goes to POST /v1/chat/completions as a strict json_schema `response_format`, greedy,
once per budget; the reply is served (200) or refused (400), and a served reply must parse and
validate under the schema, formats included, whatever its finish_reason (the promise: a valid
document at any budget).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from _jsonschemabench_compile import load_schema
from _jsonschemabench_report import share
from _server import ChildServer, asgi_llm_serve

from asgi_llm.engines.decoding.checks import validator

PROMPT = "Write one example JSON document for the schema named 'out'. Reply with the JSON only."


@dataclass(frozen=True)
class Reply:
    file: str
    budget: int
    status: int  # HTTP status
    finish: str | None = None
    valid: bool = False
    message: str = ""  # the refusal, or why the output is not valid
    content: str = ""


def sample(files: dict[str, list[str]], size: int, seed: int) -> dict[str, list[str]]:
    """`size` files of each dataset, drawn with a generator seeded by `seed` and the dataset's name
    from its files in name order: the same run draws the same files."""
    return {
        name: sorted(random.Random(f"{seed}:{name}").sample(sorted(got), min(size, len(got))))
        for name, got in files.items()
    }


def checked(schema: Any, content: str) -> str:
    """Why `content` is not a valid document under `schema` (formats included); "" when it is."""
    try:
        value = json.loads(content)
    except ValueError as exc:
        return f"not JSON: {exc}"
    error = next(iter(validator(schema).iter_errors(value)), None)
    return "" if error is None else f"invalid at '/{'/'.join(map(str, error.path))}': {error.message[:160]}"


def ask(client: httpx.Client, root: Path, file: str, budget: int) -> Reply:
    schema = load_schema(root / file)
    spec = {"name": "out", "schema": schema, "strict": True}
    body = {"model": "default", "messages": [{"role": "user", "content": PROMPT}], "temperature": 0,
            "seed": 0, "max_tokens": budget, "response_format": {"type": "json_schema", "json_schema": spec}}  # fmt: skip
    response = client.post("/v1/chat/completions", json=body)
    if response.status_code != 200:
        error = (
            response.json().get("error", {})
            if response.headers.get("content-type", "").startswith("application/json")
            else {}
        )
        return Reply(file, budget, response.status_code, message=str(error.get("message", response.text))[:300])
    choice = response.json()["choices"][0]
    content = choice["message"].get("content") or ""
    why = checked(schema, content)
    return Reply(file, budget, 200, choice.get("finish_reason"), not why, why, content)


def serve_sample(root: Path, chosen: dict[str, list[str]], budgets: list[int], threads: int | None) -> list[Reply]:
    """Every chosen file at every budget, one request at a time, against one child server."""
    options = ("--threads", str(threads)) if threads else ()
    replies: list[Reply] = []
    with (
        ChildServer("", {}, command=asgi_llm_serve(*options)) as server,
        httpx.Client(base_url=server.url, timeout=600) as client,
    ):
        for files in chosen.values():
            for file in files:
                replies.extend(ask(client, root, file, budget) for budget in budgets)
    return replies


def report(replies: list[Reply], chosen: dict[str, list[str]], declared: dict[str, bool], budgets: list[int]) -> None:
    """Per dataset and budget: declared coverage of the sample (our compile), empirical coverage
    (valid / sample), compliance (valid / served); then every served reply that is not valid."""
    print("\n## empirical coverage and compliance through `asgi-llm serve` (the sample)\n")
    print("| dataset | budget | sample | declared | served | valid | empirical coverage | compliance |")
    print("|---|---|---|---|---|---|---|---|")
    for name in [*chosen, "all"]:
        files = [f for fs in chosen.values() for f in fs] if name == "all" else chosen[name]
        compiled = sum(declared.get(f, False) for f in files)
        for budget in budgets:
            mine = [r for r in replies if r.budget == budget and r.file in set(files)]
            served, valid = sum(r.status == 200 for r in mine), sum(r.valid for r in mine)
            print(f"| {name} | {budget} | {len(files)} | {share(compiled, len(files))} | {served} | {valid} "
                  f"| {share(valid, len(files))} | {share(valid, served)} |")  # fmt: skip
    failures = [r for r in replies if r.status == 200 and not r.valid]
    print(f"\n## served but not valid ({len(failures)})\n")
    for r in failures:
        print(f"- {r.file} at {r.budget}: finish_reason {r.finish}; {r.message}; content {r.content[:120]!r}")
    disagree = [r for r in replies if (r.status == 200) != declared.get(r.file, False)]
    print(f"\n## the server and our compile disagree ({len(disagree)}: compiled but refused, or the reverse)\n")
    for r in disagree:
        print(f"- {r.file} at {r.budget}: {r.status} {r.message}")
