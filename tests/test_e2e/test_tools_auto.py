"""`tool_choice: auto` with the real model: text passes through, and a call the model begins is
finished under the call's grammar. SmolLM2 rarely begins a call on its own, so a logit bias on
`{` makes it open one: whatever follows is the model's own, held to the grammar."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import jsonschema
import llama_cpp
import openai
import pytest

from asgi_llm import ModelConfig
from asgi_llm.core import (
    ChatRequest,
    Finish,
    Message,
    SamplingParams,
    TextDelta,
    ToolCallDelta,
    ToolCallStart,
    ToolSpec,
)
from asgi_llm.engines.decoding.schema_gbnf import schema_gbnf
from asgi_llm.engines.decoding.tool_calls import plan_calls
from asgi_llm.engines.decoding.tool_detect import trigger_grammar
from asgi_llm.engines.llamacpp import LlamaCppEngine, grammar_sampler, sampling

from .local_engine import local_engine

pytestmark = [pytest.mark.anyio, pytest.mark.model]
MODEL = "SmolLM2-135M-Instruct"
PICK: dict[str, Any] = {"type": "object", "properties": {"n": {"enum": [1, 2, 3]}}, "required": ["n"]}
TOOLS = (ToolSpec("pick", "Pick a number", PICK), ToolSpec("get_time", "The time now", {}))
BRACE = 107  # "{" in SmolLM2's vocabulary


@pytest.fixture(scope="module")
async def engine(anyio_backend: object) -> AsyncIterator[LlamaCppEngine]:
    """One loaded engine for the module's tests on each backend (named, so that pytest starts one per backend:
    on its own, anyio would keep the first backend's loop running for the other backend's tests)."""
    async with local_engine(ModelConfig(n_ctx=1024)) as engine:
        model = engine.runtime.model
        assert await engine._thread.call(lambda: model.tokenize("{", add_bos=False, special=False)) == [BRACE]
        yield engine


def _request(text: str, **sampling: Any) -> ChatRequest:
    return ChatRequest(
        "m",
        (Message("user", text),),
        SamplingParams(**sampling),
        tools=TOOLS,
        tool_choice="auto",
        parallel_tool_calls=False,
    )


async def test_a_begun_call_is_finished_under_its_grammar(engine: LlamaCppEngine) -> None:
    request = _request("Pick a number.", max_tokens=64, temperature=1.5, seed=3, logit_bias=((BRACE, 100.0),))
    events = [e async for e in engine.generate(request)]
    starts = [e for e in events if isinstance(e, ToolCallStart)]
    arguments = "".join(e.arguments for e in events if isinstance(e, ToolCallDelta))  # streamed in pieces
    assert len(starts) == 1 and not any(isinstance(e, TextDelta) for e in events)
    schemas = {"pick": PICK, "get_time": {"type": "object", "maxProperties": 0}}
    jsonschema.validate(json.loads(arguments), schemas[starts[0].name])
    assert isinstance(events[-1], Finish) and events[-1].reason == "tool_calls"


async def test_text_without_a_call_passes_through(engine: LlamaCppEngine) -> None:
    events = [e async for e in engine.generate(_request("Say hello.", max_tokens=12, temperature=0))]
    assert not any(isinstance(e, ToolCallStart) for e in events)
    assert "".join(e.text for e in events if isinstance(e, TextDelta)).strip()


async def test_the_tools_note_reaches_a_template_without_tools(engine: LlamaCppEngine) -> None:
    plain = ChatRequest("m", (Message("user", "hi"),))
    offered = ChatRequest("m", (Message("user", "hi"),), tools=TOOLS)
    declined = ChatRequest("m", (Message("user", "hi"),), tools=TOOLS, tool_choice="none")
    assert await engine.count_tokens(offered) > await engine.count_tokens(plain) == await engine.count_tokens(declined)


@pytest.mark.parametrize(
    ("marker", "call_text", "primes"),
    [
        ("", "{", True),
        ("", ' {"na', True),
        ("", "[", True),
        ("<tool_call>", "\n", True),
        ("<tool_call>", '{"name": "pick", "arguments": {"n"', True),
        ("[TOOL_CALLS]", "[{", True),
        ("<|python_tag|>", '{"name": "get_time", "parameters"', True),
        ("", '{"x', False),
        ("<tool_call>", '{"name": "launch"', False),
    ],
)
async def test_trigger_grammars_prime_safely(engine: LlamaCppEngine, marker: str, call_text: str, primes: bool) -> None:
    """Text a grammar would refuse is found out before llama.cpp sees it (it would abort the process)."""
    schema = plan_calls(TOOLS, "required", parallel=False, keys=("arguments", "parameters")).form
    model = engine.runtime.model
    call_gbnf = await engine._thread.call(lambda: sampling.accepted_grammar(model, schema_gbnf(schema), "tools"))
    gbnf = trigger_grammar(call_gbnf, marker, call_text, parallel=True)

    def prime() -> bool:
        primed = grammar_sampler.primed_grammar(model, gbnf, call_text)
        if primed is None:
            return False
        llama_cpp.llama_sampler_free(primed[0])
        return True

    assert await engine._thread.call(prime) is primes


def test_openai_sdk_auto_call(client: openai.OpenAI) -> None:
    tools: Any = [
        {
            "type": "function",
            "function": {"name": t.name, "description": t.description, "parameters": dict(t.parameters)},
        }
        for t in TOOLS
    ]
    reply = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Pick a number."}],
        tools=tools,
        parallel_tool_calls=False,
        logit_bias={str(BRACE): 100},
        max_tokens=64,
        temperature=0,
    )
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls" and not choice.message.content
    (call,) = choice.message.tool_calls or []
    assert call.function.name in ("pick", "get_time")  # type: ignore[union-attr]
    json.loads(call.function.arguments)  # type: ignore[union-attr]
