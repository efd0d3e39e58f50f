"""Structured output for real pydantic models (`pydantic_table`), through the official SDKs and
their own pydantic helpers: OpenAI `chat.completions.parse` / `.stream` with the model class,
Responses `text.format` with its JSON schema, Anthropic forced tool calls with it as the
`input_schema`, and Ollama `format`. Every model runs in every protocol; streaming alternates
and the budgets rotate from 16 to 200 (`acceptance_runs`).

Every reply validates with pydantic itself (`model_validate_json` / `model_validate`),
whatever the budget: it ends on its own, or the budget closes it early, still whole. A budget
below the shortest valid reply may be refused with a 400 naming the budget field, and the
reply at exactly the length that refusal names must then validate too.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import openai
import pytest
from pydantic import BaseModel, ValidationError

from .acceptance_runs import Clients, Run, execute, refused_for_budget, run_all
from .pydantic_table import MODEL_CASES, ModelCase

MODEL = "SmolLM2-135M-Instruct"
PROTOCOLS = ("openai", "responses", "anthropic", "ollama")
pytestmark = pytest.mark.timeout(300)  # the first test's setup runs the whole table, four at a time
FINISHED = {"openai": "stop", "responses": "completed", "ollama": "stop", "anthropic": "tool_use"}
CUT = {"openai": "length", "responses": "incomplete", "ollama": "length", "anthropic": "max_tokens"}
BUDGET_PARAM = {"openai": "max_tokens", "responses": "max_output_tokens", "ollama": "options.num_predict"}
BUDGET_PARAM["anthropic"] = "max_tokens"
_LEAST = re.compile(r"allows takes (\d+) tokens")


@dataclass
class Reply:
    parsed: BaseModel  # what pydantic made of the reply
    finish: str | None


def _messages(case: ModelCase) -> list[Any]:
    return [{"role": "user", "content": f"{case.prompt} Answer in JSON."}]


async def openai_parse(clients: Clients, run: Run[ModelCase]) -> Reply:
    """The SDK's structured-outputs helpers with the model class; a reply the budget closed
    early raises `LengthFinishReasonError`, which still carries the (whole) document."""
    model = run.case.model
    common: Any = {"model": MODEL, "messages": _messages(run.case), "response_format": model}
    common |= {"max_tokens": run.budget, "temperature": 0}
    try:
        if run.stream:
            async with clients.openai.chat.completions.stream(**common) as stream:
                completion: Any = await stream.get_final_completion()
        else:
            completion = await clients.openai.chat.completions.parse(**common)
    except openai.LengthFinishReasonError as cut:
        completion = cut.completion
    choice = completion.choices[0]
    parsed = model.model_validate_json(choice.message.content or "")
    if choice.finish_reason == "stop" and choice.message.parsed != parsed:
        return Reply(parsed, f"stop, but the SDK parsed {choice.message.parsed!r}")
    return Reply(parsed, choice.finish_reason)


async def responses(clients: Clients, run: Run[ModelCase]) -> Reply:
    model = run.case.model
    common: Any = {
        "model": MODEL,
        "input": _messages(run.case),
        "text": {"format": {"type": "json_schema", "name": model.__name__, "schema": model.model_json_schema()}},
        "max_output_tokens": run.budget,
        "temperature": 0,
    }
    if not run.stream:
        response = await clients.openai.responses.create(**common)
        return Reply(model.model_validate_json(response.output_text), response.status)
    text, finish = "", None
    async for event in await clients.openai.responses.create(**common, stream=True):
        if event.type == "response.output_text.delta":
            text += event.delta
        elif event.type in ("response.completed", "response.incomplete", "response.failed"):
            finish = event.response.status
            if event.response.output_text != text:
                finish = f"{finish}, but the deltas differ from {event.response.output_text!r}"
    return Reply(model.model_validate_json(text), finish)


async def anthropic_tool(clients: Clients, run: Run[ModelCase]) -> Reply:
    model = run.case.model
    tool = {"name": "answer", "description": run.case.prompt, "input_schema": model.model_json_schema()}
    common: Any = {
        "model": MODEL,
        "max_tokens": run.budget,
        "messages": _messages(run.case),
        "tools": [tool],
        "tool_choice": {"type": "tool", "name": "answer"},
        "extra_body": {"temperature": 0},  # this version of the client takes no `temperature` argument
    }
    if run.stream:
        async with clients.claude.messages.stream(**common) as events:
            message = await events.get_final_message()
    else:
        message = await clients.claude.messages.create(**common)
    calls = [block for block in message.content if block.type == "tool_use"]
    if len(calls) != 1 or calls[0].name != "answer":
        raise AssertionError(f"not one forced call: {message.content!r}")
    return Reply(model.model_validate(calls[0].input), message.stop_reason)


async def ollama_format(clients: Clients, run: Run[ModelCase]) -> Reply:
    model = run.case.model
    common: Any = {
        "model": MODEL,
        "messages": _messages(run.case),
        "format": model.model_json_schema(),
        "options": {"temperature": 0, "num_predict": run.budget},
    }
    parts = await clients.llama.chat(**common, stream=run.stream)
    text, finish = "", None
    for part in [parts] if not run.stream else [p async for p in parts]:  # type: ignore[union-attr]
        text += part.message.content or ""
        finish = part.done_reason or finish
    return Reply(model.model_validate_json(text), finish)


ASK: dict[str, Callable[[Clients, Run[ModelCase]], Awaitable[Reply]]] = {
    "openai": openai_parse,
    "responses": responses,
    "anthropic": anthropic_tool,
    "ollama": ollama_format,
}


async def _table(url: str) -> list[Run[ModelCase]]:
    """Every model in every protocol; each run refused for its budget runs again at the length
    the refusal names as the shortest, which must then hold a valid reply."""
    runs = await run_all(url, MODEL_CASES, PROTOCOLS, ASK)
    again = []
    for run in runs:
        if run.reply is None and refused_for_budget(run, BUDGET_PARAM[run.protocol]):
            least = int(_LEAST.findall(str(run.failure))[0])
            again.append(replace(run, budget=least, error=None, failure=None))
    await execute(url, again, ASK)
    return runs + again


@pytest.fixture(scope="module")
def runs(server: Any) -> list[Run[ModelCase]]:
    return asyncio.run(_table(server.url))


def problems(run: Run[ModelCase]) -> Iterator[str]:
    reply = run.reply
    if reply is None:
        failure = run.failure
        if isinstance(failure, ValidationError):
            yield f"pydantic rejects the reply: {failure.errors(include_url=False)}"
        elif not refused_for_budget(run, BUDGET_PARAM[run.protocol]):
            yield f"request failed: {failure!r}\n{run.error}"
        return
    if reply.finish not in (FINISHED[run.protocol], CUT[run.protocol]):
        yield f"ended {reply.finish!r}"


def test_the_table_covers_what_people_write() -> None:
    assert len(MODEL_CASES) >= 30 and len({case.id for case in MODEL_CASES}) == len(MODEL_CASES)
    text = " ".join(str(case.model.model_json_schema()) for case in MODEL_CASES)
    for keyword in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "pattern"):
        assert f"'{keyword}'" in text
    for keyword in ("minLength", "maxLength", "minItems", "maxItems", "anyOf", "$ref", "enum", "const"):
        assert f"'{keyword}'" in text
    for form in ("email", "date-time", "date", "uuid", "ipv4"):
        assert f"'format': '{form}'" in text


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_every_reply_validates_with_pydantic(runs: list[Run[ModelCase]], protocol: str) -> None:
    mine = [run for run in runs if run.protocol == protocol]
    first = mine[: len(MODEL_CASES)]
    assert {run.case.id for run in first} == {case.id for case in MODEL_CASES}  # every model, in this protocol
    assert {run.stream for run in first} == {False, True} and min(r.budget for r in first) == 16
    assert max(r.budget for r in first) >= 160
    answered = [run for run in first if run.reply is not None]
    assert len(answered) >= 0.75 * len(first), "too many budgets refused for the table to test closing"
    assert any(run.reply.finish == CUT[protocol] for run in answered), "no reply was cut: closing went untested"
    failed = [f"{run.label}: {'; '.join(found)}" for run in mine if (found := list(problems(run)))]
    assert not failed, f"{len(failed)} of {len(mine)} failed:\n" + "\n".join(failed)
