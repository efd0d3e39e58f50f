"""Every field of every protocol's request model is honoured or refused, never accepted and ignored.

Each table names every field its wire model declares (a new field fails until it is put here)
with a value to try: an honoured one must change what the adapter hands the core (the request,
its options, streaming, keep-alive, a context it needs), a refused one must be a 400 naming it.
What the core then does with each part is tested where that part is implemented.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from pydantic import BaseModel

from asgi_llm.adapters.anthropic import messages as anthropic_messages
from asgi_llm.adapters.ollama import chat as ollama_chat
from asgi_llm.adapters.ollama import common as ollama_common
from asgi_llm.adapters.ollama import embed as ollama_embed
from asgi_llm.adapters.ollama import generate as ollama_generate
from asgi_llm.adapters.openai import chat as openai_chat
from asgi_llm.adapters.openai import completions as openai_completions
from asgi_llm.adapters.openai import embeddings as openai_embeddings
from asgi_llm.adapters.openai import tokenizer as openai_tokenizer
from asgi_llm.adapters.openai.responses import routes as openai_responses
from asgi_llm.core import InvalidRequest


@dataclass(frozen=True)
class Honoured:
    value: Any
    needs: dict[str, Any] = field(default_factory=dict)
    """Other fields the value needs (`top_logprobs` needs `logprobs`), in both bodies compared."""


@dataclass(frozen=True)
class Refused:
    value: Any


Row = Honoured | Refused
USER = [{"role": "user", "content": "hi"}]
TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
SCHEMA = {"type": "object", "properties": {"a": {"type": "string"}}}

OPENAI_SAMPLING: dict[str, Row] = {
    "model": Honoured("other"),
    "temperature": Honoured(0.5),
    "top_p": Honoured(0.5),
    "n": Honoured(2),
    "stream": Honoured(True),
    "stream_options": Honoured({"include_usage": True}, needs={"stream": True}),
    "stop": Honoured(["x"]),
    "seed": Honoured(7),
    "presence_penalty": Honoured(0.5),
    "frequency_penalty": Honoured(0.5),
    "logit_bias": Honoured({"42": 5}),
    "user": Honoured("u-1"),
    "lora": Honoured([{"id": "a", "scale": 0.5}]),
    "top_k": Honoured(5),
    "min_p": Honoured(0.1),
    "repeat_penalty": Honoured(1.2),
    "grammar": Honoured('root ::= "yes" | "no"'),
    "speculative": Honoured(False),
}


@dataclass(frozen=True)
class Table:
    model: type[BaseModel]
    parse: Callable[[Any], Any]
    base: dict[str, Any]
    rows: dict[str, Row]


TABLES = {
    "openai-chat": Table(
        openai_chat.ChatBody,
        openai_chat.parse,
        {"model": "m", "messages": USER},
        {
            **OPENAI_SAMPLING,
            "messages": Honoured([{"role": "user", "content": "other"}]),
            "max_tokens": Honoured(5),
            "max_completion_tokens": Honoured(5),
            "logprobs": Honoured(True),
            "top_logprobs": Honoured(2, needs={"logprobs": True}),
            "tools": Honoured([TOOL]),
            "tool_choice": Honoured("none"),
            "parallel_tool_calls": Honoured(False),
            "response_format": Honoured({"type": "json_object"}),
            "reasoning_effort": Honoured("high"),
            "chat_template_kwargs": Honoured({"enable_thinking": False}),
            "store": Refused(True),  # false is honoured: nothing is stored
            "service_tier": Refused("flex"),  # `auto` and `default` are honoured: one tier serves all
            "prompt_cache_key": Refused(5),  # a string is honoured: every prefix is cached anyway
            "prompt_cache_retention": Refused("24h"),  # `in_memory` is honoured: the cache is in memory
            "safety_identifier": Honoured("s-1"),
        },
    ),
    "openai-completions": Table(
        openai_completions.CompletionBody,
        openai_completions.parse,
        {"model": "m", "prompt": "hi"},
        {
            **OPENAI_SAMPLING,
            "prompt": Honoured("other"),
            "max_tokens": Honoured(5),
            "echo": Honoured(True),
            "logprobs": Honoured(2),
            "best_of": Refused(3),
            "suffix": Refused("tail"),
        },
    ),
    "openai-embeddings": Table(
        openai_embeddings.EmbeddingBody,
        openai_embeddings.parse,
        {"model": "m", "input": "hi"},
        {
            "model": Honoured("other"),
            "input": Honoured(["a", "b"]),
            "encoding_format": Honoured("base64"),
            "user": Honoured("u-1"),
            "dimensions": Honoured(8),
        },
    ),
    "openai-tokenize": Table(
        openai_tokenizer.TokenizeBody,
        openai_tokenizer.parse_tokenize,
        {"content": "hi"},
        {
            "model": Honoured("other"),
            "content": Honoured("other"),
            "add_special": Honoured(True),
            "parse_special": Honoured(False),
            "with_pieces": Honoured(True),
        },
    ),
    "openai-detokenize": Table(
        openai_tokenizer.DetokenizeBody,
        openai_tokenizer.parse_detokenize,
        {"tokens": [1, 2]},
        {"model": Honoured("other"), "tokens": Honoured([3])},
    ),
    "openai-apply-template": Table(
        openai_tokenizer.ApplyTemplateBody,
        openai_tokenizer.parse_template,
        {"messages": USER},
        {
            "model": Honoured("other"),
            "messages": Honoured([{"role": "user", "content": "other"}]),
            "tools": Honoured([TOOL]),
            "tool_choice": Honoured("none"),
            "reasoning_effort": Honoured("high"),
            "chat_template_kwargs": Honoured({"enable_thinking": False}),
        },
    ),
    "openai-responses": Table(
        openai_responses.ResponsesBody,
        openai_responses.parse,
        {"model": "m", "input": "hi"},
        {
            "model": Honoured("other"),
            "input": Honoured("other"),
            "instructions": Honoured("Be brief."),
            "max_output_tokens": Honoured(16),
            "max_tool_calls": Honoured(1),
            "speculative": Honoured(False),
            "metadata": Honoured({"k": "v"}),
            "parallel_tool_calls": Honoured(False),
            "previous_response_id": Honoured("resp_1"),
            "reasoning": Honoured({"effort": "none"}),
            "store": Honoured(False),
            "background": Honoured(True),
            "stream": Honoured(True),
            "temperature": Honoured(0.5),
            "top_p": Honoured(0.5),
            "top_logprobs": Honoured(2),
            "include": Honoured(["message.output_text.logprobs"]),
            "text": Honoured({"format": {"type": "json_object"}}),
            "tools": Honoured([{"type": "function", "name": "f", "parameters": {"type": "object"}}]),
            "tool_choice": Honoured("none"),
            "truncation": Refused("auto"),
            "user": Honoured("u-1"),
            "service_tier": Refused("flex"),  # `auto` and `default` are honoured: one tier serves all
            "prompt_cache_retention": Refused("24h"),  # `in_memory` is honoured: the cache is in memory
            "safety_identifier": Honoured("s-1"),
        },
    ),
    "anthropic-messages": Table(
        anthropic_messages.MessagesBody,
        anthropic_messages.parse,
        {"model": "m", "max_tokens": 16, "messages": USER},
        {
            "model": Honoured("other"),
            "max_tokens": Honoured(8),
            "messages": Honoured([{"role": "user", "content": "other"}]),
            "system": Honoured("Be brief."),
            "metadata": Honoured({"user_id": "u-1"}),
            "stop_sequences": Honoured(["x"]),
            "stream": Honoured(True),
            "temperature": Honoured(0.5),
            "top_k": Honoured(5),
            "top_p": Honoured(0.5),
            "speculative": Honoured(False),
            "thinking": Honoured({"type": "disabled"}),
            "tools": Honoured([{"name": "f", "input_schema": {"type": "object"}}]),
            "tool_choice": Honoured(
                {"type": "any"}, needs={"tools": [{"name": "f", "input_schema": {"type": "object"}}]}
            ),
            "output_format": Honoured({"type": "json_schema", "schema": SCHEMA}),
            "output_config": Honoured({"format": {"type": "json_schema", "schema": SCHEMA}}),
            "cache_control": Honoured({"type": "ephemeral"}),
        },
    ),
    "ollama-chat": Table(
        ollama_chat.ChatBody,
        ollama_chat.parse,
        {"model": "m", "messages": USER},
        {
            "model": Honoured("other"),
            "messages": Honoured([{"role": "user", "content": "other"}]),
            "format": Honoured("json"),
            "options": Honoured({"temperature": 0.1}),
            "stream": Honoured(False),
            "keep_alive": Honoured("5m"),
            "think": Honoured(False),
            "tools": Honoured([TOOL]),
            "logprobs": Honoured(True),
            "top_logprobs": Honoured(2, needs={"logprobs": True}),
        },
    ),
    "ollama-generate": Table(
        ollama_generate.GenerateBody,
        ollama_generate.parse,
        {"model": "m", "prompt": "hi"},
        {
            "model": Honoured("other"),
            "prompt": Honoured("other"),
            "system": Honoured("Be brief."),
            "raw": Honoured(True),
            "format": Honoured("json"),
            "options": Honoured({"temperature": 0.1}),
            "stream": Honoured(False),
            "keep_alive": Honoured("5m"),
            "think": Honoured(False),
            "logprobs": Honoured(True),
            "top_logprobs": Honoured(2, needs={"logprobs": True}),
            "suffix": Refused("tail"),
            "images": Honoured(["aGk="]),
            "template": Refused("{{ .Prompt }}"),
            "context": Refused([1, 2]),
        },
    ),
    "ollama-embed": Table(
        ollama_embed.EmbedBody,
        ollama_embed.parse_embed,
        {"model": "m", "input": "hi"},
        {
            "model": Honoured("other"),
            "input": Honoured(["a", "b"]),
            "truncate": Honoured(False),
            "keep_alive": Honoured("5m"),
            "options": Refused({"temperature": 0.1}),  # num_ctx alone is honoured, as in chat
            "dimensions": Honoured(8),
        },
    ),
    "ollama-options": Table(
        ollama_common.WireOptions,
        lambda options: ollama_chat.parse({"model": "m", "messages": USER, "options": options}),
        {},
        {
            "num_predict": Honoured(5),
            "temperature": Honoured(0.1),
            "top_k": Honoured(5),
            "top_p": Honoured(0.5),
            "min_p": Honoured(0.1),
            "seed": Honoured(7),
            "stop": Honoured(["x"]),
            "repeat_penalty": Honoured(1.2),
            "presence_penalty": Honoured(0.5),
            "frequency_penalty": Honoured(0.5),
            "num_ctx": Honoured(4096),
            "speculative": Honoured(False),
        },
    ),
}

CASES = [(name, field_name) for name, table in TABLES.items() for field_name in table.rows]


@pytest.mark.parametrize("name", sorted(TABLES))
def test_every_declared_field_has_a_row(name: str) -> None:
    table = TABLES[name]
    declared = {info.alias or key for key, info in table.model.model_fields.items()}
    assert declared == set(table.rows)


@pytest.mark.parametrize(("name", "field_name"), CASES, ids=[f"{n}.{f}" for n, f in CASES])
def test_a_field_changes_what_the_core_gets_or_is_refused(name: str, field_name: str) -> None:
    table = TABLES[name]
    row = table.rows[field_name]
    if isinstance(row, Refused):
        with pytest.raises(InvalidRequest) as refused:
            table.parse({**table.base, field_name: row.value})
        param = refused.value.param or ""
        assert refused.value.status == 400 and field_name in (
            param,
            param.removeprefix("options."),
            param.split(".")[0],
        )
        return
    base = {**table.base, **row.needs}
    assert table.parse({**base, field_name: row.value}) != table.parse(base)


@pytest.mark.parametrize("name", sorted(TABLES))
def test_a_field_no_model_declares_is_refused_by_name(name: str) -> None:
    table = TABLES[name]
    with pytest.raises(InvalidRequest) as refused:
        table.parse({**table.base, "no_such_field": 1})
    assert (refused.value.param or "").removeprefix("options.") == "no_such_field"


CALL = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
ANTHROPIC_TOOL = {"name": "f", "input_schema": {"type": "object"}}
NESTED: list[tuple[str, dict[str, Any], str]] = [
    ("openai-chat", {"messages": [{"role": "user", "content": "hi", "audio": {"id": "a"}}]}, "messages[0].audio"),
    (
        "openai-chat",
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi", "x": 1}]}]},
        "messages[0].content[0].x",
    ),
    (
        "openai-chat",
        {"messages": [*USER, {"role": "assistant", "content": None, "tool_calls": [{**CALL, "z": 1}]}]},
        "messages[1].tool_calls[0].z",
    ),
    (
        "openai-chat",
        {
            "messages": [
                *USER,
                {"role": "assistant", "tool_calls": [{**CALL, "function": {**CALL["function"], "x": 1}}]},
            ]
        },
        "messages[1].tool_calls[0].function.x",
    ),
    ("openai-chat", {"tools": [{**TOOL, "defer_loading": True}]}, "tools[0].defer_loading"),
    ("openai-chat", {"tools": [{"type": "function", "function": {"name": "f", "foo": 1}}]}, "tools[0].function.foo"),
    (
        "openai-chat",
        {"tools": [TOOL], "tool_choice": {"type": "function", "function": {"name": "f"}, "y": 1}},
        "tool_choice.y",
    ),
    ("openai-chat", {"response_format": {"type": "json_object", "foo": 1}}, "response_format.foo"),
    (
        "openai-chat",
        {"response_format": {"type": "json_schema", "json_schema": {"name": "o", "schema": SCHEMA, "foo": 1}}},
        "response_format.json_schema.foo",
    ),
    ("openai-responses", {"text": {"format": {"type": "text"}, "foo": 1}}, "text.foo"),
    ("openai-responses", {"text": {"format": {"type": "text", "foo": 1}}}, "text.format.foo"),
    ("openai-responses", {"reasoning": {"generate_summary": "auto"}}, "reasoning.generate_summary"),
    ("anthropic-messages", {"output_config": {"effort": "low"}}, "output_config.effort"),
    ("anthropic-messages", {"tools": [{**ANTHROPIC_TOOL, "input_examples": []}]}, "tools[0].input_examples"),
    (
        "anthropic-messages",
        {"tools": [ANTHROPIC_TOOL], "tool_choice": {"type": "auto", "bogus": 1}},
        "tool_choice.bogus",
    ),
    ("anthropic-messages", {"thinking": {"type": "disabled", "display": "omitted"}}, "thinking.display"),
    ("anthropic-messages", {"metadata": {"user_id": "u", "foo": "bar"}}, "metadata.foo"),
    ("anthropic-messages", {"messages": [{"role": "user", "content": "hi", "name": "bob"}]}, "messages[0].name"),
    (
        "anthropic-messages",
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi", "citations": [{"x": 1}]}]}]},
        "messages[0].content[0].citations",
    ),
    ("ollama-chat", {"messages": [{"role": "user", "content": "hi", "foo": 1}]}, "messages[0].foo"),
    ("ollama-chat", {"tools": [{**TOOL, "x": 1}]}, "tools[0].x"),
    (
        "ollama-chat",
        {"tools": [{"type": "function", "function": {"name": "f", "strict": True}}]},
        "tools[0].function.strict",
    ),
]


@pytest.mark.parametrize(("name", "fields", "param"), NESTED, ids=[p for _, _, p in NESTED])
def test_a_field_no_model_declares_is_refused_by_name_at_any_depth(
    name: str, fields: dict[str, Any], param: str
) -> None:
    table = TABLES[name]
    with pytest.raises(InvalidRequest) as refused:
        table.parse({**table.base, **fields})
    assert refused.value.status == 400 and refused.value.param == param
    assert f"'{param}'" in refused.value.message
