"""Acceptance: structured output with the real model, over every schema of `acceptance_cases`, through
the official SDKs: chat `response_format` (json_schema, strict), Responses `text.format`, Ollama
`format` and Anthropic `output_config.format`.

Every schema runs in every protocol; whether it streams alternates with the schema and the
protocol, so each protocol gets about half the schemas each way, and each run has a token
budget from 16 to 200 (see `acceptance_runs`). Each reply must be one JSON document that
validates against the schema as the client wrote it, whatever the budget: given room for the
schema's longest document it must end on its own; given less it may be cut (and must say so),
or refused with a 400 naming the budget when even the shortest document would not fit.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import jsonschema
import pytest

from .acceptance_cases import SCHEMA_CASES, TOKEN_CAP, SchemaCase
from .acceptance_runs import Clients, Run, refused_for_budget, run_all

MODEL = "SmolLM2-135M-Instruct"
PROTOCOLS = ("chat", "responses", "ollama", "anthropic")
# The first test's setup runs every case in every protocol: up to 5 minutes on 2 cores, past the default timeout.
pytestmark = pytest.mark.timeout(600)
FINISHED = {"chat": "stop", "responses": "completed", "ollama": "stop", "anthropic": "end_turn"}
CUT = {"chat": "length", "responses": "incomplete", "ollama": "length", "anthropic": "max_tokens"}
BUDGET_PARAM = {"chat": "max_tokens", "responses": "max_output_tokens", "ollama": "options.num_predict"}
BUDGET_PARAM["anthropic"] = "max_tokens"


@dataclass
class Reply:
    text: str
    finish: str | None


def _ask(case: SchemaCase) -> str:
    return f"{case.prompt} Answer in JSON."


async def chat(clients: Clients, run: Run[SchemaCase]) -> Reply:
    case, stream = run.case, run.stream
    common: Any = {
        "model": MODEL,
        "messages": [{"role": "user", "content": _ask(case)}],
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "answer", "schema": case.schema, "strict": True},
        },
        "max_tokens": run.budget,
        "temperature": 0,
        "seed": 7,
    }
    if not stream:
        completion = await clients.openai.chat.completions.create(**common)
        return Reply(completion.choices[0].message.content or "", completion.choices[0].finish_reason)
    reply = Reply("", None)
    async for chunk in await clients.openai.chat.completions.create(**common, stream=True):
        for c in chunk.choices:
            reply.text += c.delta.content or ""
            reply.finish = c.finish_reason or reply.finish
    return reply


async def responses(clients: Clients, run: Run[SchemaCase]) -> Reply:
    case, stream = run.case, run.stream
    common: Any = {
        "model": MODEL,
        "input": _ask(case),
        "text": {"format": {"type": "json_schema", "name": "answer", "schema": case.schema, "strict": True}},
        "max_output_tokens": run.budget,
        "temperature": 0,
    }
    if not stream:
        response = await clients.openai.responses.create(**common)
        return Reply(response.output_text, response.status)
    reply = Reply("", None)
    async for event in await clients.openai.responses.create(**common, stream=True):
        if event.type == "response.output_text.delta":
            reply.text += event.delta
        elif event.type in ("response.completed", "response.incomplete", "response.failed"):
            reply.finish = event.response.status
            if event.response.output_text != reply.text:
                reply.finish = f"{reply.finish}, but the deltas differ from {event.response.output_text!r}"
    return reply


async def ollama_chat(clients: Clients, run: Run[SchemaCase]) -> Reply:
    case, stream = run.case, run.stream
    common: Any = {
        "model": MODEL,
        "messages": [{"role": "user", "content": _ask(case)}],
        "format": case.schema,
        "options": {"temperature": 0, "seed": 7, "num_predict": run.budget},
    }
    parts = await clients.llama.chat(**common, stream=stream)
    reply = Reply("", None)
    for part in [parts] if not stream else [p async for p in parts]:  # type: ignore[union-attr]
        reply.text += part.message.content or ""
        reply.finish = part.done_reason or reply.finish
    return reply


async def messages(clients: Clients, run: Run[SchemaCase]) -> Reply:
    case, stream = run.case, run.stream
    common: Any = {
        "model": MODEL,
        "max_tokens": run.budget,
        "messages": [{"role": "user", "content": _ask(case)}],
        "output_config": {"format": {"type": "json_schema", "schema": case.schema}},
        "extra_body": {"temperature": 0},  # this version of the client takes no `temperature` argument
    }
    if not stream:
        message = await clients.claude.messages.create(**common)
    else:
        async with clients.claude.messages.stream(**common) as events:
            deltas = "".join(
                [e.delta.text async for e in events if e.type == "content_block_delta" and e.delta.type == "text_delta"]
            )
            message = await events.get_final_message()
    text = "".join(block.text for block in message.content if block.type == "text")
    if stream and deltas != text:
        return Reply(text, f"{message.stop_reason}, but the deltas were {deltas!r}")
    return Reply(text, message.stop_reason)


ASK: dict[str, Callable[[Clients, Run[SchemaCase]], Awaitable[Reply]]] = {
    "chat": chat,
    "responses": responses,
    "ollama": ollama_chat,
    "anthropic": messages,
}


@pytest.fixture(scope="module")
def runs(server: Any) -> list[Run[SchemaCase]]:
    return asyncio.run(run_all(server.url, SCHEMA_CASES, PROTOCOLS, ASK))


def problems(run: Run[SchemaCase]) -> Iterator[str]:
    reply = run.reply
    if reply is None:
        if not refused_for_budget(run, BUDGET_PARAM[run.protocol]):
            yield f"request failed:\n{run.error}"
        return
    endings = (FINISHED[run.protocol],) if run.roomy else (FINISHED[run.protocol], CUT[run.protocol])
    if reply.finish not in endings:
        yield f"ended {reply.finish!r}, not {' or '.join(map(repr, endings))}"
    try:
        jsonschema.validate(json.loads(reply.text), run.case.schema)
    except ValueError as exc:
        yield f"not JSON: {exc}"
    except jsonschema.ValidationError as exc:
        yield f"does not validate: {str(exc).splitlines()[0]}"


def test_the_schemas_are_many_and_varied() -> None:
    assert len(SCHEMA_CASES) >= 50
    text = json.dumps([case.schema for case in SCHEMA_CASES])
    for keyword in ('"integer"', '"number"', '"boolean"', '"null"', '"enum"', '"const"', '"items"', '"prefixItems"'):
        assert keyword in text
    for keyword in ('"anyOf"', '"oneOf"', '"allOf"', '"$ref"', '"$defs"', '"definitions"', '"format"', '"minLength"'):
        assert keyword in text
    roots = {json.dumps(case.schema.get("type")) for case in SCHEMA_CASES}
    assert {'"object"', '"array"', '"string"', '"integer"', '"number"', '"boolean"', "null"} <= roots
    assert len({case.id for case in SCHEMA_CASES}) == len(SCHEMA_CASES)
    assert all(case.max_tokens <= TOKEN_CAP for case in SCHEMA_CASES)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_structured_output_always_validates(runs: list[Run[SchemaCase]], protocol: str, stream: bool) -> None:
    mine = [run for run in runs if run.protocol == protocol and run.stream == stream]
    assert len(mine) >= 25
    answered = [run for run in mine if run.reply is not None]
    assert len(answered) >= 0.8 * len(mine), "too many budgets refused for the table to test closing"
    assert any(run.reply.finish == CUT[protocol] for run in answered), "no reply was cut: closing went untested"
    failed = [
        f"{run.label}: {'; '.join(found)}\n    output: {run.reply!r}" for run in mine if (found := list(problems(run)))
    ]
    assert not failed, f"{len(failed)} of {len(mine)} failed:\n" + "\n".join(failed)
