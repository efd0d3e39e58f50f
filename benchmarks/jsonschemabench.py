"""JSONSchemaBench (guidance-ai/jsonschemabench, arXiv 2501.10868): how much of real-world JSON Schema
structured output takes, and whether what it serves is valid.

Why: our converter refuses what it cannot enforce exactly, so "which schemas do clients send that
we refuse, and why" decides what to implement next; the dataset's ~9,500 schemas (GitHub,
Kubernetes, JSON Schema Store, Snowplow, Washington Post, Glaive function calls) are the yardstick
the paper measured other engines with.

1. Declared coverage of our converter: the share of schemas that compile exactly as a request does
   (`grammar.enforceable`, `schema_gbnf`, the closing watch's GBNF reader, llama.cpp's grammar
   sampler over the packaged model's vocabulary), timed; invalid JSON Schemas counted apart;
   refusals grouped by cause.
2. The same for llguidance (`LLMatcher.grammar_from_json_schema` + `validate_grammar`) and for
   llama-cpp-python's own converter (`json_schema_to_gbnf` + llama.cpp's acceptance).
   Every compile runs in a child process with a time limit: a time-out counts as not covered.
3. Empirical coverage and compliance: a seeded sample per dataset through `asgi-llm serve`, strict
   json_schema `response_format`, greedy, at each budget; a served reply must be a valid document.

Run (the dataset unpacked by hand; nothing downloads, and this never runs in CI or tests):
    .venv/bin/pip install llguidance      # part 2's column only; without it the column is skipped
    .venv/bin/python benchmarks/jsonschemabench.py --data PATH/TO/data [--no-serve] [--sample 50]
        [--budgets 512,64] [--limit N] [--timeout 10] [--jobs 1] [--results FILE]
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import sys
import time
from pathlib import Path

import _jsonschemabench_report as report
import llama_cpp
from _jsonschemabench_compile import ENGINES, Compiled, compile_all
from _jsonschemabench_serve import Reply, sample, serve_sample
from _jsonschemabench_serve import report as serve_report

import asgi_llm


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--data", type=Path, required=True, help="the unpacked data folder: <Dataset>/*.json")
    parser.add_argument("--limit", type=int, help="compile only the first N files of each dataset (by name)")
    parser.add_argument("--timeout", type=float, default=10, help="seconds one compile may take (default 10)")
    parser.add_argument("--jobs", type=int, default=1, help="compile workers (default 1)")
    parser.add_argument("--no-compile", action="store_true", help="skip parts 1 and 2 (the sample is still compiled)")
    parser.add_argument("--no-serve", action="store_true", help="skip part 3")
    parser.add_argument("--sample", type=int, default=50, help="schemas per dataset sent to the server (default 50)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the sample (default 0)")
    parser.add_argument("--budgets", default="512,64", help="max_tokens values, comma-separated (default 512,64)")
    parser.add_argument("--threads", type=int, help="llama.cpp threads of the server (default: its own)")
    parser.add_argument("--top", type=int, default=15, help="refusal causes listed overall (5 per dataset)")
    parser.add_argument("--results", type=Path, help="write every compile and reply here as JSON Lines")
    return parser.parse_args()


def dataset_files(data: Path, limit: int | None) -> dict[str, list[str]]:
    """Each dataset's files as "<dataset>/<name>.json", in name order."""
    found = {
        d.name: sorted(f"{d.name}/{f.name}" for f in d.glob("*.json")) for d in sorted(data.iterdir()) if d.is_dir()
    }
    if not any(found.values()):
        raise SystemExit(f"no <Dataset>/*.json files under {data}")
    return {name: files[:limit] for name, files in found.items() if files}


def engines() -> tuple[str, ...]:
    if importlib.util.find_spec("llguidance") is not None:
        return ENGINES
    print("llguidance is not installed: its column is skipped (.venv/bin/pip install llguidance)", file=sys.stderr)
    return tuple(e for e in ENGINES if e != "llguidance")


def compile_part(args: argparse.Namespace, files: dict[str, list[str]]) -> list[Compiled]:
    """Parts 1 and 2: every file through every converter, then the tables."""
    names, used = list(files), engines()
    every = [f for fs in files.values() for f in fs]
    print(f"compiling {len(every)} schemas with {', '.join(used)}; {args.timeout:g} s limit, {args.jobs} worker(s)")
    started = time.monotonic()
    results = compile_all(args.data, every, used, args.timeout, args.jobs)
    print(f"compiled in {time.monotonic() - started:.0f} s (load average now {os.getloadavg()[0]:.1f})")
    report.coverage_table(results, used, names)
    report.ours_table(results, names)
    report.timing_table(results, used)
    for engine in used:
        report.causes(results, engine, names, args.top, 5 if engine == "ours" else 0)
    report.listed(results, 5)
    return results


def serve_part(args: argparse.Namespace, files: dict[str, list[str]], compiled: list[Compiled]) -> list[Reply]:
    """Part 3: the sample through a real server; declared coverage of the sample from our compile."""
    chosen = sample(files, args.sample, args.seed)
    known = {r.file for r in compiled if r.engine == "ours"}
    missing = [f for fs in chosen.values() for f in fs if f not in known]
    compiled = [*compiled, *compile_all(args.data, missing, ("ours",), args.timeout, 1)] if missing else compiled
    declared = {r.file: r.status == "covered" for r in compiled if r.engine == "ours"}
    budgets = [int(b) for b in args.budgets.split(",")]
    print(f"\nserving {sum(map(len, chosen.values()))} schemas (seed {args.seed}) at budgets {budgets}")
    replies = serve_sample(args.data, chosen, budgets, args.threads)
    serve_report(replies, chosen, declared, budgets)
    return replies


def versions() -> str:
    """What is measured: where asgi_llm is imported from, and the other converters' versions."""
    found = [f"asgi_llm from {Path(asgi_llm.__file__).parent}", f"llama-cpp-python {llama_cpp.__version__}"]
    if importlib.util.find_spec("llguidance") is not None:
        import llguidance

        found.append(f"llguidance {llguidance.__version__}")
    return ", ".join(found)


def main() -> None:
    args = arguments()
    print(f"{versions()}; load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    files = dataset_files(args.data, None)
    compiled = [] if args.no_compile else compile_part(args, dataset_files(args.data, args.limit))
    replies = [] if args.no_serve else serve_part(args, files, compiled)
    if args.results:
        with args.results.open("w") as out:
            rows: list[Compiled | Reply] = [*compiled, *replies]
            out.writelines(json.dumps({"kind": type(r).__name__, **dataclasses.asdict(r)}) + "\n" for r in rows)


if __name__ == "__main__":
    main()
