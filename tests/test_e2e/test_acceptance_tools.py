"""Acceptance: forced tool calls with the real model, over every case of `acceptance_cases`, in all
four protocols, streaming and not, through the official SDKs.

Every case runs in every protocol; whether it streams alternates with the case and the protocol,
so each protocol gets about half the cases each way, and each run has a token budget from 16 to
200 (see `acceptance_runs`). `required` / `any` and a named tool must give calls to tools of
the set (the named one, when named), whose arguments validate against that tool's schema as the
client wrote it, whatever the budget: at least one call, none repeated; exactly one where
parallel calls are turned off. Given room for the longest call a reply must end on its own; given
less it may be cut (and must say so), or refused with a 400 naming the budget when even the
shortest call would not fit. Every third run leaves parallel calls at their default (on). A
streamed call's fragments must add up to the call.

Ollama has no `tool_choice`, so there a call cannot be forced: each case is offered its tools
(`auto`) after an earlier turn in which the model called one, and any call it makes must name a
tool of the set and validate. The official Ollama client sends a tool's parameters through its
own model, which keeps only each top-level property's `type`, `items`, `enum` and
`description`: calls are checked against the schema as it reached the server.

The requests run a few at a time (the engine queues them), all of a case's protocols together,
so the prompt they share is read once.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import jsonschema
import ollama
import pytest

from .acceptance_cases import TOKEN_CAP, TOOL_CASES, ToolCase, example
from .acceptance_runs import Clients, Run, refused_for_budget, run_all

MODEL = "SmolLM2-135M-Instruct"
PROTOCOLS = ("chat", "responses", "anthropic", "ollama")
# The first test's setup runs every case in every protocol: up to 5 minutes on 2 cores, past the default timeout.
pytestmark = pytest.mark.timeout(600)
OLLAMA_LIMIT = 192  # strings arrive unbounded (see above), so a call may run on: cut it short


@dataclass
class Reply:
    """What a client got: calls as (name, arguments as sent: JSON text or an object), and how it ended."""

    calls: list[tuple[str, Any]] = field(default_factory=list)
    finish: str | None = None
    text: str = ""
    problems: list[str] = field(default_factory=list)  # stream-shape faults seen while reading


# -- OpenAI chat ------------------------------------------------------------------


def _openai_tools(case: ToolCase) -> Any:
    return [
        {"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}
        for t in case.tools
    ]


def _parallel(run: Run[ToolCase]) -> bool:
    """Whether the run leaves parallel calls on (their default)."""
    return run.slot % 3 == 0


async def chat(clients: Clients, run: Run[ToolCase]) -> Reply:
    case, stream = run.case, run.stream
    choice: Any = "required" if case.choice == "required" else {"type": "function", "function": {"name": case.choice}}
    common: Any = {
        "model": MODEL,
        "messages": [{"role": "user", "content": case.prompt}],
        "tools": _openai_tools(case),
        "tool_choice": choice,
        **({} if _parallel(run) else {"parallel_tool_calls": False}),
        "max_tokens": run.budget,
        "temperature": 0,
        "seed": 7,
    }
    if not stream:
        completion = await clients.openai.chat.completions.create(**common)
        c = completion.choices[0]
        calls = [(t.function.name, t.function.arguments) for t in c.message.tool_calls or () if t.type == "function"]
        return Reply(calls, c.finish_reason, c.message.content or "")
    reply = Reply()
    names: dict[int, str] = {}
    arguments: dict[int, str] = {}
    async for chunk in await clients.openai.chat.completions.create(**common, stream=True):
        for c in chunk.choices:
            reply.text += c.delta.content or ""
            for delta in c.delta.tool_calls or ():
                function = delta.function
                if function is not None and function.name:
                    if delta.index in names or not (delta.id and delta.id.startswith("call_")):
                        reply.problems.append(f"call {delta.index} named twice or without an id")
                    names[delta.index] = function.name
                elif delta.index not in names:
                    reply.problems.append(f"arguments for call {delta.index} before its name")
                arguments[delta.index] = arguments.get(delta.index, "") + ((function and function.arguments) or "")
            reply.finish = c.finish_reason or reply.finish
    reply.calls = [(names[i], arguments.get(i, "")) for i in sorted(names)]
    return reply


# -- OpenAI Responses -------------------------------------------------------------


async def responses(clients: Clients, run: Run[ToolCase]) -> Reply:
    case, stream = run.case, run.stream
    tools: Any = [
        {"type": "function", "name": t.name, "description": t.description, "parameters": t.parameters}
        for t in case.tools
    ]
    choice: Any = "required" if case.choice == "required" else {"type": "function", "name": case.choice}
    common: Any = {
        "model": MODEL,
        "input": case.prompt,
        "tools": tools,
        "tool_choice": choice,
        **({} if _parallel(run) else {"parallel_tool_calls": False}),
        "max_output_tokens": run.budget,
        "temperature": 0,
    }
    if not stream:
        response = await clients.openai.responses.create(**common)
        calls = [(item.name, item.arguments) for item in response.output if item.type == "function_call"]
        return Reply(calls, response.status, response.output_text)
    reply = Reply()
    deltas: dict[str, str] = {}
    async for event in await clients.openai.responses.create(**common, stream=True):
        if event.type == "response.function_call_arguments.delta":
            deltas[event.item_id] = deltas.get(event.item_id, "") + event.delta
        elif event.type == "response.function_call_arguments.done":
            if deltas.get(event.item_id) != event.arguments:
                reply.problems.append(f"deltas {deltas.get(event.item_id)!r} != done {event.arguments!r}")
        elif event.type == "response.output_text.delta":
            reply.text += event.delta
        elif event.type in ("response.completed", "response.incomplete", "response.failed"):
            reply.finish = event.response.status
            for item in event.response.output:
                if item.type == "function_call":
                    reply.calls.append((item.name, item.arguments))
                    if item.id not in deltas:
                        reply.problems.append(f"call {item.id} came with no argument deltas")
    return reply


# -- Anthropic Messages -----------------------------------------------------------


async def messages(clients: Clients, run: Run[ToolCase]) -> Reply:
    case, stream = run.case, run.stream
    tools: Any = [{"name": t.name, "description": t.description, "input_schema": t.parameters} for t in case.tools]
    single: Any = {} if _parallel(run) else {"disable_parallel_tool_use": True}
    choice: Any = (
        {"type": "any", **single} if case.choice == "required" else {"type": "tool", "name": case.choice, **single}
    )
    common: Any = {
        "model": MODEL,
        "max_tokens": run.budget,
        "messages": [{"role": "user", "content": case.prompt}],
        "tools": tools,
        "tool_choice": choice,
        "extra_body": {"temperature": 0},  # this version of the client takes no `temperature` argument
    }
    reply = Reply()
    if not stream:
        message = await clients.claude.messages.create(**common)
    else:
        partial: dict[int, str] = {}
        async with clients.claude.messages.stream(**common) as events:
            async for event in events:
                if event.type == "content_block_delta" and event.delta.type == "input_json_delta":
                    partial[event.index] = partial.get(event.index, "") + event.delta.partial_json
            message = await events.get_final_message()
        for i, block in enumerate(message.content):
            if block.type == "tool_use" and (i not in partial or json.loads(partial[i]) != block.input):
                reply.problems.append(f"input_json_delta {partial.get(i)!r} does not add up to {block.input!r}")
    reply.finish = message.stop_reason
    for block in message.content:
        if block.type == "tool_use":
            reply.calls.append((block.name, block.input))
            if not block.id.startswith("toolu_"):
                reply.problems.append(f"tool-use id {block.id!r} is not Anthropic's toolu_ form")
        elif block.type == "text":
            reply.text += block.text
    return reply


# -- Ollama -------------------------------------------------------------------------


def _ollama_tools(case: ToolCase) -> list[dict[str, Any]]:
    return [
        {"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}
        for t in case.tools
    ]


def as_sent_by_ollama(case: ToolCase) -> dict[str, Any]:
    """Each tool's parameters as the official Ollama client sends them (it drops what its model lacks)."""
    sent = {}
    for tool in _ollama_tools(case):
        wire = ollama.Tool.model_validate(tool).model_dump(exclude_none=True, by_alias=True)
        sent[wire["function"]["name"]] = wire["function"]["parameters"]
    return sent


def _earlier_call(case: ToolCase) -> list[dict[str, Any]]:
    """A turn in which the model called the tool the case is about, and that call's result."""
    wanted = next(t for t in case.tools if case.prompt in t.prompts)
    return [
        {"role": "user", "content": wanted.prompts[-1] if case.prompt != wanted.prompts[-1] else wanted.prompts[0]},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"function": {"name": wanted.name, "arguments": example(wanted.parameters)}}],
        },
        {"role": "tool", "content": "done", "tool_name": wanted.name},
        {"role": "assistant", "content": "Done."},
    ]


async def ollama_chat(clients: Clients, run: Run[ToolCase]) -> Reply:
    case, stream = run.case, run.stream
    common: Any = {
        "model": MODEL,
        "messages": [*_earlier_call(case), {"role": "user", "content": case.prompt}],
        "tools": _ollama_tools(case),
        "options": {"temperature": 0, "seed": 7, "num_predict": min(run.budget, OLLAMA_LIMIT)},
    }
    parts = await clients.llama.chat(**common, stream=stream)
    reply = Reply()
    for part in [parts] if not stream else [p async for p in parts]:  # type: ignore[union-attr]
        reply.text += part.message.content or ""
        reply.calls += [(call.function.name, dict(call.function.arguments)) for call in part.message.tool_calls or ()]
        reply.finish = part.done_reason or reply.finish
    return reply


ASK: dict[str, Callable[[Clients, Run[ToolCase]], Awaitable[Reply]]] = {
    "chat": chat,
    "responses": responses,
    "anthropic": messages,
    "ollama": ollama_chat,
}


@pytest.fixture(scope="module")
def runs(server: Any) -> list[Run[ToolCase]]:
    return asyncio.run(run_all(server.url, TOOL_CASES, PROTOCOLS, ASK))


# -- checks ---------------------------------------------------------------------------

FORCED_FINISH = {"chat": "tool_calls", "responses": "completed", "anthropic": "tool_use"}
CUT = {"chat": "length", "responses": "incomplete", "anthropic": "max_tokens"}
BUDGET_PARAM = {"chat": "max_tokens", "responses": "max_output_tokens", "anthropic": "max_tokens"}


def _arguments(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def forced_problems(run: Run[ToolCase]) -> Iterator[str]:
    """What is wrong with a forced call's reply; nothing when its calls are valid calls of the right
    tool (exactly one, unless parallel calls are on), none repeated."""
    reply = run.reply
    if reply is None:
        if not refused_for_budget(run, BUDGET_PARAM[run.protocol]):
            yield f"request failed:\n{run.error}"
        return
    yield from reply.problems
    finished = FORCED_FINISH[run.protocol]
    endings = (finished,) if run.roomy else (finished, CUT[run.protocol])
    if reply.finish not in endings:
        yield f"ended {reply.finish!r}, not {' or '.join(map(repr, endings))}"
    if not reply.calls or (len(reply.calls) != 1 and not _parallel(run)):
        yield f"{len(reply.calls)} calls, not {'1 or more' if _parallel(run) else '1'} (text {reply.text!r})"
    same = [json.dumps([name, _arguments(arguments)], sort_keys=True) for name, arguments in reply.calls]
    if len(set(same)) != len(same):
        yield "a call repeated"
    schemas = run.case.schemas
    for name, arguments in reply.calls:
        if run.case.choice not in ("required", name) or name not in schemas:
            yield f"called {name!r}; the choice was {run.case.choice!r} of {list(schemas)}"
            continue
        try:
            jsonschema.validate(_arguments(arguments), schemas[name])
        except (ValueError, jsonschema.ValidationError) as exc:
            yield f"arguments {arguments!r} of {name!r} are not valid: {str(exc).splitlines()[0]}"


def offered_problems(run: Run[ToolCase]) -> Iterator[str]:
    """What is wrong with an Ollama reply to offered tools: any call must be valid, or none come."""
    reply = run.reply
    if reply is None:
        yield f"request failed:\n{run.error}"
        return
    if reply.finish not in ("stop", "length"):  # cut short, it keeps the calls it completed
        yield f"ended {reply.finish!r}"
    if not reply.calls and not reply.text.strip():
        yield "nothing visible"
    sent = as_sent_by_ollama(run.case)
    for name, arguments in reply.calls:
        if name not in sent:
            yield f"called {name!r}, not one of {list(sent)}"
            continue
        try:
            jsonschema.validate(arguments, sent[name])
        except jsonschema.ValidationError as exc:
            yield f"arguments {arguments!r} of {name!r} are not valid: {str(exc).splitlines()[0]}"


def failures(runs: list[Run[ToolCase]], check: Callable[[Run[ToolCase]], Iterator[str]]) -> list[str]:
    """One line per failed run: which case, protocol and mode, what is wrong, and what came."""
    found = [(run, list(check(run))) for run in runs]
    return [f"{run.label}: {'; '.join(problems)}\n    output: {run.reply!r}" for run, problems in found if problems]


def test_the_cases_are_many_and_varied() -> None:
    """The cases themselves: at least 50, with every kind of value, one to three tools, both choices."""
    assert len(TOOL_CASES) >= 50
    text = json.dumps([[t.parameters for t in case.tools] for case in TOOL_CASES])
    for keyword in ('"integer"', '"number"', '"boolean"', '"enum"', '"items"', '"anyOf"', '"$ref"', '"format"'):
        assert keyword in text
    nested = [t for case in TOOL_CASES for t in case.tools if '"properties"' in json.dumps(t.parameters)[1:]]
    assert nested and {len(case.tools) for case in TOOL_CASES} == {1, 2, 3}
    assert {case.choice == "required" for case in TOOL_CASES} == {True, False}
    assert any(
        set(t.parameters.get("required", ())) < set(t.parameters["properties"])
        for case in TOOL_CASES
        for t in case.tools
    )
    assert len({case.id for case in TOOL_CASES}) == len(TOOL_CASES)
    assert all(case.max_tokens <= TOKEN_CAP for case in TOOL_CASES)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("protocol", ["chat", "responses", "anthropic"])
def test_forced_calls_are_always_valid(runs: list[Run[ToolCase]], protocol: str, stream: bool) -> None:
    mine = [run for run in runs if run.protocol == protocol and run.stream == stream]
    assert len(mine) >= 25
    answered = [run for run in mine if run.reply is not None]
    assert len(answered) >= 0.6 * len(mine), "too many budgets refused for the table to test closing"
    assert any(run.reply.finish == CUT[protocol] for run in answered), "no reply was cut: closing went untested"
    failed = failures(mine, forced_problems)
    assert not failed, f"{len(failed)} of {len(mine)} failed:\n" + "\n".join(failed)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_ollama_calls_to_offered_tools_are_always_valid(runs: list[Run[ToolCase]], stream: bool) -> None:
    mine = [run for run in runs if run.protocol == "ollama" and run.stream == stream]
    assert len(mine) >= 25
    failed = failures(mine, offered_problems)
    assert not failed, f"{len(failed)} of {len(mine)} failed:\n" + "\n".join(failed)
    # A call begun with too few tokens left for its shortest form cannot be finished (with `auto`
    # a call is only allowed, so a budget cannot be refused up front): only runs with room count.
    room = [run for run in mine if run.budget >= 24]
    called = [run for run in room if run.reply and run.reply.calls]
    assert len(called) >= len(room) // 2, f"only {len(called)} of {len(room)} replies with room called a tool"
