"""Running acceptance cases through every protocol's official client, a few at a time."""

from __future__ import annotations

import asyncio
import traceback
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import anthropic
import ollama
import openai

__all__ = ["Clients", "Run", "run_all"]

CONCURRENCY = 4
TIMEOUT = 600
Case = TypeVar("Case")


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
    reply: Any = None
    error: str | None = None

    @property
    def label(self) -> str:
        return f"{getattr(self.case, 'id')} [{self.protocol}, {'stream' if self.stream else 'whole'}]"


async def run_all(
    url: str,
    cases: Sequence[Case],
    protocols: Sequence[str],
    ask: Mapping[str, Callable[[Clients, Case, bool], Awaitable[Any]]],
) -> list[Run[Case]]:
    """Every case in every protocol; streaming alternates by case and protocol, so each protocol
    sees both modes. A case's protocols run together and share its cached prompt."""
    runs = [Run(case, p, (i + protocols.index(p)) % 2 == 0) for i, case in enumerate(cases) for p in protocols]
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
                    run.reply = await ask[run.protocol](clients, run.case, run.stream)
                except Exception:  # noqa: BLE001  (reported with its case, protocol and mode)
                    run.error = traceback.format_exc(limit=3)

        await asyncio.gather(*(one(run) for run in runs))
    return runs
