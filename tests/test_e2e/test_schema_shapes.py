"""The schema shapes structured output enforces by grammar, with the real model and the official
clients: one schema per keyword family (recursion, oneOf, if/then/else, dependencies, not, tuples,
contains, uniqueItems, `required` alone, huge lengths), each through one protocol, the protocols,
streaming and budgets rotating over the set; a forced tool call whose parameters recurse through
a oneOf; and the pydantic models people write, through the OpenAI SDK's `parse` helper.

Every reply validates against the client's own schema (formats checked), whatever the budget: it
ends on its own (the protocol's "stop"), or the budget closes it early (its "length"), still
whole, within the budget. A tight budget is the least the server names in its 400 for one token
less, plus one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import anthropic
import ollama
import openai
import pytest
from pydantic import BaseModel, Field, conlist

from asgi_llm.engines.decoding.checks import validator

from .schema_shapes_cases import (
    CONTAINS,
    DEPENDENT_REQUIRED,
    HUGE_STRING,
    IF_THEN_ELSE,
    NOT,
    PETS,
    REQUIRED_ONLY,
    TREE,
    TREE_TOOL,
    TUPLE,
    UNIQUE,
)

pytestmark = pytest.mark.model
MODEL = "SmolLM2-135M-Instruct"
ROOMY = 128
_LEAST = re.compile(r"allows takes (\d+) tokens")


@dataclass
class Reply:
    text: str
    finished: bool  # ended on its own (the protocol's "stop"); False: the budget closed it ("length")
    tokens: int  # output tokens, as the protocol's usage reports them


@dataclass
class Clients:
    openai: openai.OpenAI
    anthropic: anthropic.Anthropic
    ollama: ollama.Client


@pytest.fixture(scope="module")
def clients(server, client: openai.OpenAI) -> Iterator[Clients]:  # type: ignore[no-untyped-def]
    claude = anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=60)
    llama = ollama.Client(host=server.url, timeout=60)
    yield Clients(client, claude, llama)
    claude.close()
    llama.close()


def _messages(ask: str) -> list[Any]:
    return [{"role": "user", "content": f"{ask} Answer in JSON."}]


def least(sdk: openai.OpenAI, schema: dict[str, Any]) -> int:
    """The fewest tokens a document under `schema` takes, as the 400 for a budget of 1 names it."""
    with pytest.raises(openai.BadRequestError) as refused:
        chat(sdk, schema, "Anything.", 1, stream=False)
    assert refused.value.param == "max_tokens"
    found = _LEAST.search(refused.value.message)
    assert found, refused.value.message
    return int(found[1])


def chat(sdk: openai.OpenAI, schema: dict[str, Any], ask: str, budget: int, *, stream: bool) -> Reply:
    response_format: Any = {"type": "json_schema", "json_schema": {"name": "shape", "schema": schema, "strict": True}}
    common: Any = {"model": MODEL, "messages": _messages(ask), "max_tokens": budget, "temperature": 0}
    if not stream:
        reply = sdk.chat.completions.create(**common, response_format=response_format)
        assert reply.usage is not None
        return _reply(reply.choices[0].message.content, reply.choices[0].finish_reason, reply.usage.completion_tokens)
    chunks = list(
        sdk.chat.completions.create(
            **common, response_format=response_format, stream=True, stream_options={"include_usage": True}
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    reasons = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(reasons) == 1 and chunks[-1].usage is not None, reasons
    return _reply(text, reasons[0], chunks[-1].usage.completion_tokens)


def _reply(text: str | None, reason: str | None, tokens: int, stop: str = "stop", cut: str = "length") -> Reply:
    assert text is not None and reason in (stop, cut), reason
    return Reply(text, reason == stop, tokens)


def responses(sdk: openai.OpenAI, schema: dict[str, Any], ask: str, budget: int, *, stream: bool) -> Reply:
    fmt: Any = {"type": "json_schema", "name": "shape", "schema": schema, "strict": True}
    common: Any = {"model": MODEL, "input": f"{ask} Answer in JSON.", "max_output_tokens": budget, "temperature": 0}
    if stream:
        events = list(sdk.responses.create(**common, text={"format": fmt}, stream=True))
        ends = [e for e in events if e.type in ("response.completed", "response.incomplete")]
        assert len(ends) == 1 and ends[0] is events[-1], [e.type for e in events]
        response: Any = ends[0].response
    else:
        response = sdk.responses.create(**common, text={"format": fmt})
    if response.status == "incomplete":
        assert response.incomplete_details.reason == "max_output_tokens"
    return _reply(response.output_text, response.status, response.usage.output_tokens, "completed", "incomplete")


def messages(sdk: anthropic.Anthropic, schema: dict[str, Any], ask: str, budget: int, *, stream: bool) -> Reply:
    common: Any = {"model": MODEL, "max_tokens": budget, "messages": _messages(ask), "extra_body": {"temperature": 0}}
    output_config: Any = {"format": {"type": "json_schema", "schema": schema}}
    if stream:
        with sdk.messages.stream(**common, output_config=output_config) as events:
            reply = events.get_final_message()
    else:
        reply = sdk.messages.create(**common, output_config=output_config)
    assert [block.type for block in reply.content] == ["text"]
    text = reply.content[0].text  # type: ignore[union-attr]
    return _reply(text, reply.stop_reason, reply.usage.output_tokens, "end_turn", "max_tokens")


def ollama_chat(sdk: ollama.Client, schema: dict[str, Any], ask: str, budget: int, *, stream: bool) -> Reply:
    common: Any = {"model": MODEL, "messages": _messages(ask), "format": schema}
    common["options"] = {"num_predict": budget, "temperature": 0}
    if stream:
        parts = list(sdk.chat(**common, stream=True))
        assert [p.done for p in parts].index(True) == len(parts) - 1
        text, last = "".join(p.message.content or "" for p in parts), parts[-1]
    else:
        last = sdk.chat(**common)
        text = last.message.content or ""
    assert last.eval_count is not None
    return _reply(text, last.done_reason, last.eval_count)


@dataclass(frozen=True)
class Shape:
    schema: dict[str, Any]
    ask: str
    protocol: Literal["chat", "responses", "messages", "ollama"]
    tight: bool  # the least budget the server takes (plus one), else ROOMY
    stream: bool


SHAPES = {
    "recursive-tree": Shape(TREE, "A family tree of three people.", "chat", tight=False, stream=False),
    "not": Shape(NOT, "A user's access level, mode and note.", "chat", tight=True, stream=True),
    "required-without-properties": Shape(REQUIRED_ONLY, "A product's id and label.", "chat", False, stream=True),
    "one-of-discriminated": Shape(PETS, "Pick a pet: a cat, a dog or a fox.", "responses", tight=True, stream=True),
    "additional-items-tuple": Shape(TUPLE, "A table row: a name, an age, then flags.", "responses", False, False),
    "huge-max-length": Shape(
        HUGE_STRING, "A long essay about the sea, ten paragraphs at least.", "responses", tight=False, stream=True
    ),
    "if-then-else": Shape(
        IF_THEN_ELSE, "A person: adult with licence, or child with school.", "messages", False, False
    ),
    "contains": Shape(CONTAINS, "Exam scores of a class.", "messages", tight=True, stream=True),
    "dependent-required": Shape(DEPENDENT_REQUIRED, "A customer with a card.", "ollama", tight=False, stream=True),
    "unique-items": Shape(UNIQUE, "Colours of a flag and two flags.", "ollama", tight=True, stream=False),
}


def run(clients: Clients, shape: Shape, budget: int) -> Reply:
    if shape.protocol == "chat":
        return chat(clients.openai, shape.schema, shape.ask, budget, stream=shape.stream)
    if shape.protocol == "responses":
        return responses(clients.openai, shape.schema, shape.ask, budget, stream=shape.stream)
    if shape.protocol == "messages":
        return messages(clients.anthropic, shape.schema, shape.ask, budget, stream=shape.stream)
    return ollama_chat(clients.ollama, shape.schema, shape.ask, budget, stream=shape.stream)


def _valid(document: Any, schema: dict[str, Any], reply: Reply | None = None) -> None:
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator(schema).iter_errors(document)]
    assert not errors, (reply or document, errors)


@pytest.mark.parametrize("name", SHAPES)
def test_every_reply_validates_whatever_the_budget(clients: Clients, name: str) -> None:
    shape = SHAPES[name]
    budget = least(clients.openai, shape.schema) + 1 if shape.tight else ROOMY
    reply = run(clients, shape, budget)
    assert reply.tokens <= budget, (reply, budget)
    _valid(json.loads(reply.text), shape.schema, reply)


def test_a_budget_below_the_shortest_document_is_a_400_and_that_least_is_enough(clients: Clients) -> None:
    fewest = least(clients.openai, PETS)
    assert 5 < fewest < 30  # {"pet": {"kind": "fox"}} at the least
    with pytest.raises(openai.BadRequestError) as refused:
        chat(clients.openai, PETS, "A pet.", fewest - 1, stream=False)
    assert f"'max_tokens' is {fewest - 1}" in refused.value.message
    reply = chat(clients.openai, PETS, "A pet.", fewest, stream=False)
    assert reply.tokens <= fewest
    _valid(json.loads(reply.text), PETS)


def test_a_forced_tool_call_with_recursive_one_of_parameters(clients: Clients) -> None:
    tool: Any = {"type": "function", "function": {"name": "make_tree", "description": "Creates files and folders"}}
    tool["function"]["parameters"] = TREE_TOOL
    reply = clients.openai.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Create the folder 'src' holding the files 'a.py' and 'b.py'."}],
        tools=[tool],
        tool_choice="required",
        parallel_tool_calls=False,
        max_tokens=ROOMY,
        temperature=0,
    )
    choice = reply.choices[0]
    calls = choice.message.tool_calls or []
    assert len(calls) == 1 and calls[0].function.name == "make_tree"  # type: ignore[union-attr]
    _valid(json.loads(calls[0].function.arguments), TREE_TOOL)  # type: ignore[union-attr]
    assert reply.usage is not None and reply.usage.completion_tokens <= ROOMY
    assert choice.finish_reason in ("tool_calls", "length")


class Node(BaseModel):
    name: str
    children: list[Node]


class Cat(BaseModel):
    kind: Literal["cat"]
    lives: int


class Dog(BaseModel):
    kind: Literal["dog"]
    good: bool


class Fox(BaseModel):
    kind: Literal["fox"]
    colour: str


class Sighting(BaseModel):
    animal: Annotated[Cat | Dog | Fox, Field(discriminator="kind")]
    place: str


class Sparse(BaseModel):
    nickname: str | None = None
    age: int | None = None
    height: float | None = None
    tags: list[str] | None = None
    home: Sighting | None = None


class Series(BaseModel):
    readings: conlist(int, max_length=1000)  # type: ignore[valid-type]
    marks: Annotated[list[int], Field(max_length=1000)]


class Item(BaseModel):
    title: str
    count: int


class Inventory(BaseModel):
    shelves: dict[str, Item]


PYDANTIC: dict[str, tuple[type[BaseModel], str]] = {
    "recursive-tree": (Node, "A family tree: a parent with two children."),
    "discriminated-union": (Sighting, "An animal you saw (a cat, a dog or a fox) and where."),
    "optional-everywhere": (Sparse, "A stranger called Bo, aged 40."),
    "long-lists": (Series, "Readings: 12, 15 and 11. Marks: 7 and 9."),
    "dict-of-models": (Inventory, "A small shop's inventory by shelf."),
}


@pytest.mark.parametrize("name", PYDANTIC)
def test_pydantic_models_through_the_sdk_parse_helper(client: openai.OpenAI, name: str) -> None:
    """`parse` sends the model's (strict) schema and validates the reply into the model; a reply
    the budget closed raises `LengthFinishReasonError`, still carrying a whole document."""
    model, ask = PYDANTIC[name]
    try:
        completion: Any = client.chat.completions.parse(
            model=MODEL, messages=_messages(ask), response_format=model, max_tokens=ROOMY, temperature=0
        )
        parsed = completion.choices[0].message.parsed
        assert completion.choices[0].finish_reason == "stop"
    except openai.LengthFinishReasonError as cut:
        completion = cut.completion
        parsed = model.model_validate_json(completion.choices[0].message.content or "")
    assert isinstance(parsed, model)
    assert completion.usage.completion_tokens <= ROOMY
