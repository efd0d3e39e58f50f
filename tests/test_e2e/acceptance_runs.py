"""Running acceptance cases through every protocol's official client, a few at a time, each run
with a token budget of its own: the budgets rotate over `BUDGETS` (16 to 200, the small ones
most often), capped at the case's own room for its longest output (a run given that room must
end on its own; one given less may be cut, and must still be valid)."""

from __future__ import annotations

import asyncio
import re
import traceback
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import anthropic
import ollama
import openai

__all__ = ["BUDGETS", "Clients", "Run", "execute", "refused_for_budget", "run_all"]

CONCURRENCY = 4
TIMEOUT = 600
Case = TypeVar("Case")
BUDGETS = (16, 18, 20, 24, 28, 32, 16, 40, 48, 20, 64, 96, 24, 128, 160, 200)
_LEAST = re.compile(r"shortest output the requested format or tool call allows takes (\d+) tokens")


@dataclass
class Clients:
    openai: openai.AsyncOpenAI
    claude: anthropic.AsyncAnthropic
    llama: ollama.AsyncClient


@dataclass
class Run(Generic[Case]):
    case: Case
    protocol: str
    stream: bool
    budget: int
    slot: int  # the run's place in the table, for variations other than the budget
    reply: Any = None
    error: str | None = None
    failure: Exception | None = None

    @property
    def roomy(self) -> bool:
        """Whether the budget holds the case's longest output (then it must end on its own)."""
        return self.budget >= int(self.case.max_tokens)

    @property
    def label(self) -> str:
        mode = "stream" if self.stream else "whole"
        return f"{self.case.id} [{self.protocol}, {mode}, budget {self.budget}]"


def refused_for_budget(run: Run[Any], param: str) -> bool:
    """Whether the run was refused (400, naming `param`) because its budget cannot hold the
    shortest valid output, and that output is indeed longer than the budget."""
    failure = run.failure
    if getattr(failure, "status_code", None) != 400:
        return False
    found = _LEAST.search(str(failure))
    return found is not None and int(found.group(1)) > run.budget and f"'{param}'" in str(failure)


async def run_all(
    url: str,
    cases: Sequence[Case],
    protocols: Sequence[str],
    ask: Mapping[str, Callable[[Clients, Run[Case]], Awaitable[Any]]],
) -> list[Run[Case]]:
    """Every case in every protocol; streaming alternates by case and protocol, so each protocol
    sees both modes, and the budgets rotate. A case's protocols run together and share its cached prompt."""
    runs = []
    for i, case in enumerate(cases):
        for j, p in enumerate(protocols):
            slot = i * len(protocols) + j
            budget = min(BUDGETS[(slot + i) % len(BUDGETS)], int(case.max_tokens))
            runs.append(Run(case, p, (i + j) % 2 == 0, budget, slot))
    await execute(url, runs, ask)
    return runs


async def execute(
    url: str, runs: Sequence[Run[Case]], ask: Mapping[str, Callable[[Clients, Run[Case]], Awaitable[Any]]]
) -> None:
    """Each run through its protocol's client, a few at a time; its reply or its failure is kept on it."""
    gate = asyncio.Semaphore(CONCURRENCY)
    async with (
        openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=TIMEOUT) as oa,
        anthropic.AsyncAnthropic(base_url=url, api_key="unused", max_retries=0, timeout=TIMEOUT) as claude,
        ollama.AsyncClient(host=url, timeout=TIMEOUT) as llama,
    ):
        clients = Clients(oa, claude, llama)

        async def one(run: Run[Case]) -> None:
            async with gate:
                try:
                    run.reply = await ask[run.protocol](clients, run)
                except Exception as exc:  # noqa: BLE001  (reported with its case, protocol and mode)
                    run.error = traceback.format_exc(limit=3)
                    run.failure = exc

        await asyncio.gather(*(one(run) for run in runs))
