"""The llama.cpp engine under grammars, straight from the real model at a high temperature: whatever
it samples, a finished document parses and validates against the schema as the client wrote it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import jsonschema
import pytest

from asgi_llm import ModelConfig
from asgi_llm.core import (
    ChatRequest,
    Finish,
    GenerationEvent,
    InvalidRequest,
    Message,
    OutputFormat,
    SamplingParams,
    TextDelta,
    ToolCallDelta,
    ToolCallStart,
    ToolSpec,
    Unsupported,
)
from asgi_llm.engines.decoding.constraints import constraint_for
from asgi_llm.engines.decoding.schema_gbnf import schema_gbnf
from asgi_llm.engines.llamacpp import LlamaCppEngine
from asgi_llm.engines.llamacpp.sampling import Sampling, accepted_grammar

from .local_engine import local_engine

pytestmark = [pytest.mark.anyio, pytest.mark.model]
SHORT = {"type": "string", "maxLength": 12}
SCHEMAS: list[Any] = [
    pytest.param(
        {
            "type": "object",
            "properties": {
                "kind": {"enum": ["cat", "dog", 3, None]},
                "name": {"anyOf": [SHORT, {"type": "null"}]},
                "tags": {"type": "array", "items": SHORT, "minItems": 1, "maxItems": 2},
            },
            "required": ["kind", "tags"],
        },
        id="enum-anyof-bounded-array",
    ),
    pytest.param(
        {
            "$defs": {
                "point": {
                    "type": "object",
                    "properties": {"x": {"type": "number"}, "y": {"type": "integer"}},
                    "required": ["x", "y"],
                }
            },
            "type": "object",
            "properties": {
                "from": {"$ref": "#/$defs/point"},
                "to": {"$ref": "#/$defs/point"},
                "ok": {"type": "boolean"},
            },
            "required": ["from", "to", "ok"],
        },
        id="refs-numbers-boolean",
    ),
    pytest.param(
        {
            "type": "object",
            "properties": {
                "day": {"type": "string", "format": "date"},
                "code": {"type": "string", "minLength": 2, "maxLength": 4},
            },
            "required": ["day", "code"],
        },
        id="date-and-lengths",
    ),
    pytest.param(
        {"type": "array", "prefixItems": [{"type": "integer"}, {"const": "x"}, {"type": ["boolean", "null"]}]},
        id="tuple",
    ),
]


TODO = {
    "type": "object",
    "properties": {
        "title": {"type": "string", "maxLength": 24},
        "priority": {"enum": [1, 2, 3]},
        "due": {"type": "string", "format": "date"},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 10}, "maxItems": 3},
    },
    "required": ["title", "priority"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
async def engine(anyio_backend: object) -> AsyncIterator[LlamaCppEngine]:
    """One loaded engine for the module's tests on each backend (named, so that pytest starts one per backend:
    on its own, anyio would keep the first backend's loop running for the other backend's tests)."""
    async with local_engine(ModelConfig(n_ctx=1024)) as engine:
        yield engine


def _request(sampling: SamplingParams, **fields: Any) -> ChatRequest:
    return ChatRequest(model="m", messages=(Message("user", "Make up some JSON data."),), sampling=sampling, **fields)


async def _events(engine: LlamaCppEngine, request: ChatRequest) -> list[GenerationEvent]:
    return [event async for event in engine.generate(request)]


@pytest.mark.parametrize("schema", SCHEMAS)
async def test_hot_sampling_still_yields_valid_documents(engine: LlamaCppEngine, schema: dict[str, Any]) -> None:
    fmt = OutputFormat("json_schema", "format", schema)
    sampling = SamplingParams(max_tokens=96, temperature=1.5, seed=11, output_format=fmt)
    events = await _events(engine, _request(sampling, n=2))  # a checked engine raises on an invalid document
    finishes = [e for e in events if isinstance(e, Finish)]
    assert len(finishes) == 2
    for finish in finishes:
        text = "".join(e.text for e in events if isinstance(e, TextDelta) and e.index == finish.index)
        if finish.reason == "stop":
            jsonschema.validate(json.loads(text), schema)


async def test_parallel_forced_calls_at_a_high_temperature(engine: LlamaCppEngine) -> None:
    tools = (
        ToolSpec("pick", None, {"type": "object", "properties": {"n": {"enum": [1, 2, 3]}}, "required": ["n"]}),
        ToolSpec("note", None, {"type": "object", "properties": {"text": SHORT}, "required": ["text"]}),
    )
    sampling = SamplingParams(max_tokens=128, temperature=1.2, seed=5)
    events = await _events(engine, _request(sampling, tools=tools, tool_choice="required"))
    starts = [e for e in events if isinstance(e, ToolCallStart)]
    arguments = [
        "".join(d.arguments for d in events if isinstance(d, ToolCallDelta) and d.call_index == i)
        for i in range(len(starts))
    ]
    assert [s.call_index for s in starts] == list(range(len(starts)))  # the pieces of each call, joined
    assert len(starts) >= (1 if events[-1].reason == "tool_calls" else 0)  # type: ignore[union-attr]
    schemas = {t.name: t.parameters for t in tools}
    for start, text in zip(starts, arguments):
        jsonschema.validate(json.loads(text), schemas[start.name])
    assert not any(isinstance(e, TextDelta) for e in events)


async def test_an_unenforceable_schema_fails_before_any_event(engine: LlamaCppEngine) -> None:
    fmt = OutputFormat("json_schema", "text.format.schema", {"type": "string", "pattern": "(?<=a)b"})
    stream = engine.generate(_request(SamplingParams(max_tokens=8, output_format=fmt)))
    with pytest.raises(Unsupported) as caught:
        await stream.__anext__()
    assert caught.value.param == "text.format.schema"


RAMBLE = {
    "type": "object",
    "properties": {"story": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}}},
    "required": ["story", "tags"],
}


@pytest.mark.parametrize("budget", [11, 13, 15])
async def test_a_rambling_document_is_closed_within_its_budget(engine: LlamaCppEngine, budget: int) -> None:
    """A long free-text field at a high temperature would run past any small budget: the output
    is closed in time, still valid, and still says it was cut."""
    fmt = OutputFormat("json_schema", "format", RAMBLE)
    sampling = SamplingParams(max_tokens=budget, temperature=1.3, seed=budget, output_format=fmt)
    ask = Message("user", "Write a very long story as JSON.")
    events = await _events(engine, ChatRequest(model="m", messages=(ask,), sampling=sampling))
    finish = events[-1]
    assert isinstance(finish, Finish) and finish.reason == "length"
    assert finish.usage.completion_tokens <= budget
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    jsonschema.validate(json.loads(text), RAMBLE)


async def test_a_budget_too_small_for_any_document_is_refused_naming_it(engine: LlamaCppEngine) -> None:
    fmt = OutputFormat("json_schema", "format", RAMBLE)
    sampling = SamplingParams(max_tokens=4, output_format=fmt, max_tokens_param="max_output_tokens")
    stream = engine.generate(_request(sampling))
    with pytest.raises(InvalidRequest) as caught:
        await stream.__anext__()
    assert caught.value.param == "max_output_tokens"


async def test_a_repeated_parallel_call_ends_the_reply(engine: LlamaCppEngine) -> None:
    """Left to itself, the model repeats this call until its budget is spent (and the last, cut,
    is lost); a repeat ends the reply instead, with the one call it made."""
    tools = (ToolSpec("add_todo", "Add an item to the to-do list", TODO),)
    ask = Message("user", "Remind me to buy milk tomorrow, low priority.")
    sampling = SamplingParams(max_tokens=120, temperature=0)
    request = ChatRequest(model="m", messages=(ask,), sampling=sampling, tools=tools, tool_choice="required")
    events = await _events(engine, request)
    assert [e.name for e in events if isinstance(e, ToolCallStart)] == ["add_todo"]
    finish = events[-1]
    assert isinstance(finish, Finish) and finish.reason == "tool_calls"


@pytest.mark.parametrize(
    ("first", "then", "closing"),
    [
        ('<tool_call>{"name": "add_todo", "arguments": {"title": "milk", "priority": 3}}</tool_call>',
         '\n<tool_call>{"name": "add_todo", "arguments": {"priority": 3, "title": "milk"}}', True),
        ('<tool_call>{"name": "add_todo", "arguments": {"title": "milk", "priority": 3}}</tool_call>',
         '\n<tool_call>{"name": "add_todo", "arguments": {"title": "eggs", "priority": 3}}', False),
        ('[{"name": "add_todo", "arguments": {"title": "milk", "priority": 1}}',
         ', {"name": "add_todo", "arguments": {"title": "milk", "priority": 1}}', True),
    ],
)  # fmt: skip
async def test_an_auto_call_that_repeats_an_earlier_one_ends_the_output(
    engine: LlamaCppEngine, first: str, then: str, closing: bool
) -> None:
    """Calls begun in free text (`auto`, parallel calls on) are watched as forced ones are: a call
    that repeats an earlier one, whatever its key order, makes the sampler end the output."""
    tools = (ToolSpec("add_todo", "Add an item to the to-do list", TODO),)
    request = ChatRequest(model="m", messages=(Message("user", "hi"),), sampling=SamplingParams(), tools=tools)
    lazy = constraint_for(request).lazy
    assert lazy is not None and lazy.parallel
    model = engine.runtime.model
    sampling = Sampling(model, lambda row: None, request.sampling, 0, lazy=(lazy, accepted_grammar(model, schema_gbnf(lazy.form), "tools")))
    for text, closes in ((first, False), (then, closing)):
        for at in range(0, len(text), 3):  # a few characters at a time, as tokens come
            sampling.saw(text[at : at + 3], 1000)  # room to end: the calls are held
        assert sampling.closing is closes
