"""JSONSchemaBench, parts 1 and 2: the tables printed from the compile results (Markdown)."""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from collections.abc import Iterable

from _jsonschemabench_compile import Compiled

OURS_STATUSES = ("covered", "invalid", "refused", "rejected", "unreadable", "error", "timeout", "crashed")
_QUOTED_VALUE = re.compile(r"'(?:#|https?:|\.{0,2}/)[^']*'")  # references and paths, not keywords
# fmt: off
KEYWORDS = {  # JSON Schema's keywords, drafts 4 to 2020-12
    "$ref", "$dynamicRef", "$recursiveRef", "$id", "$anchor", "additionalItems", "additionalProperties",
    "allOf", "anyOf", "const", "contains", "contentEncoding", "contentMediaType", "contentSchema",
    "dependencies", "dependentRequired", "dependentSchemas", "else", "enum", "exclusiveMaximum",
    "exclusiveMinimum", "format", "if", "items", "maxContains", "maxItems", "maxLength", "maxProperties",
    "maximum", "minContains", "minItems", "minLength", "minProperties", "minimum", "multipleOf", "not", "oneOf",
    "pattern", "patternProperties", "prefixItems", "properties", "propertyNames", "required", "then", "type",
    "unevaluatedItems", "unevaluatedProperties", "uniqueItems",
}
# fmt: on


def dataset(file: str) -> str:
    return file.split("/", 1)[0]


def by_dataset(results: Iterable[Compiled], engine: str) -> dict[str, list[Compiled]]:
    """`engine`'s results per dataset, plus "all"."""
    grouped: dict[str, list[Compiled]] = defaultdict(list)
    for result in results:
        if result.engine == engine:
            grouped[dataset(result.file)].append(result)
            grouped["all"].append(result)
    return grouped


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def share(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}% ({part})" if whole else "—"


def cause(message: str) -> str:
    """A refusal message without what varies from schema to schema (where, which reference, which
    values, numbers): messages of the same cause group together."""
    text = re.sub(r" at '[^']*'", "", message).replace(" in 'response_format'", "").replace("'response_format' ", "")
    text = text.removesuffix(".").removesuffix(" cannot be enforced while decoding")
    text = re.sub(r"^'[^']*' (breaks|refers)", r"'…' \1", text)
    text = _QUOTED_VALUE.sub("'…'", text)
    if text.startswith("is not a valid JSON Schema"):
        text = re.sub(r"'[^']*'", "'…'", text)
    return re.sub(r"\[.*\]|\{.*\}|\b\d+(\.\d+)?\b", "…", text)[:110]


def keyword(message: str) -> str:
    """The JSON Schema keyword a refusal names first, quoted (`'dependencies'`); else its cause."""
    folded = cause(message)
    named = [word for word in re.findall(r"'([$\w]+)'", folded) if word in KEYWORDS]
    return f"'{named[0]}'" if named else folded


def other_cause(message: str) -> str:
    """llguidance's and llama-cpp-python's messages, with values and positions folded."""
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()] or ["(no message)"]
    first = lines[-1] if lines[0].endswith(":") else lines[0]  # "regex parse error:" ... "error: look-around ..."
    first = re.sub(r"(unknown escape| at index| at \d| of /).*", r"\1", first)
    first = re.sub(r"\{.*\}|\[.{40,}\]", "{…}", first)
    return re.sub(r"(?<!\w)'[^']{24,}'(?!\w)|(?<=identifier )'[^']*'|\b\d+\b", "…", first)[:110]


def coverage_table(results: list[Compiled], engines: tuple[str, ...], datasets: list[str]) -> None:
    """Declared coverage per dataset: the share of all schemas each converter compiles."""
    ours, columns = by_dataset(results, "ours"), {e: by_dataset(results, e) for e in engines}
    print("\n## declared coverage: schemas each converter compiles (share of all schemas)\n")
    print(f"| dataset | schemas | invalid | {' | '.join(engines)} |")
    print("|---|---|---|" + "---|" * len(engines))
    for name in [*datasets, "all"]:
        count = len(ours[name])
        invalid = sum(r.status == "invalid" for r in ours[name])
        cells = [share(sum(r.status == "covered" for r in columns[e][name]), count) for e in engines]
        print(f"| {name} | {count} | {share(invalid, count)} | {' | '.join(cells)} |")


def ours_table(results: list[Compiled], datasets: list[str]) -> None:
    """Our converter's outcomes per dataset, and its compile time (every step) over covered schemas."""
    ours = by_dataset(results, "ours")
    print("\n## our converter: outcomes, and compile ms over covered schemas\n")
    print(f"| dataset | {' | '.join(OURS_STATUSES)} | p50 ms | p95 ms | max ms |")
    print("|---|" + "---|" * (len(OURS_STATUSES) + 3))
    for name in [*datasets, "all"]:
        counts = Counter(r.status for r in ours[name])
        times = [r.seconds * 1e3 for r in ours[name] if r.status == "covered" and r.seconds is not None]
        spread = [f"{percentile(times, q):.1f}" for q in (0.5, 0.95, 1.0)] if times else ["—"] * 3
        print(f"| {name} | {' | '.join(str(counts[s]) for s in OURS_STATUSES)} | {' | '.join(spread)} |")


def timing_table(results: list[Compiled], engines: tuple[str, ...]) -> None:
    """Each converter's compile time over the schemas it compiled, all datasets together."""
    print("\n## compile time over the schemas each converter compiled (all datasets)\n")
    print("| converter | compiled | p50 ms | p95 ms | max ms | timeouts |\n|---|---|---|---|---|---|")
    for engine in engines:
        mine = by_dataset(results, engine)["all"]
        times = [r.seconds * 1e3 for r in mine if r.status == "covered" and r.seconds is not None]
        spread = [f"{percentile(times, q):.1f}" for q in (0.5, 0.95, 1.0)] if times else ["—"] * 3
        timeouts = sum(r.status == "timeout" for r in mine)
        print(f"| {engine} | {len(times)} | {' | '.join(spread)} | {timeouts} |")


def causes(results: list[Compiled], engine: str, datasets: list[str], top: int, each: int) -> None:
    """`engine`'s most frequent refusal causes overall (`top`, ours with its variants and an example
    file) and per dataset (`each`); ours grouped by the keyword each refusal names."""
    ours = engine == "ours"
    grouped = by_dataset((r for r in results if r.status not in ("covered", "timeout", "crashed")), engine)

    def key(r: Compiled) -> str:
        return f"{r.status}: {keyword(r.message) if ours else other_cause(r.message)}"

    print(f"\n## top refusal causes: {engine} ({len(grouped.get('all', []))} schemas not compiled)\n")
    for group, count in Counter(map(key, grouped.get("all", []))).most_common(top):
        members = [r for r in grouped["all"] if key(r) == group]
        print(f"- {group} ×{count} (e.g. {members[0].file})")
        variants = Counter(cause(r.message) for r in members).most_common(3) if ours else []
        for variant, n in variants if len(variants) > 1 or (variants and variants[0][0] not in group) else []:
            print(f"  - {variant} ×{n}")
    for name in datasets if each else []:
        counted = Counter(map(key, grouped.get(name, [])))
        print(f"- **{name}**: " + ("; ".join(f"{c} ×{n}" for c, n in counted.most_common(each)) or "none"))


def listed(results: list[Compiled], slowest: int) -> None:
    """Every time-out, crash and converter error by file, and our slowest compiles."""
    print("\n## time-outs, crashes and converter errors\n")
    odd = [r for r in results if r.status in ("timeout", "crashed", "error")]
    for r in odd:
        print(f"- {r.engine} {r.status}: {r.file} — {r.message[:200]}")
    if not odd:
        print("none")
    ours = sorted((r for r in results if r.engine == "ours" and r.seconds is not None), key=lambda r: -(r.seconds or 0))
    print(f"\n## our {slowest} slowest compiles (every step, whatever the outcome)\n")
    for r in ours[:slowest]:
        print(
            f"- {r.file}: {(r.seconds or 0) * 1e3:.0f} ms, {r.status}" + (f": {cause(r.message)}" if r.message else "")
        )
