"""Structured output as each protocol asks for it, parsed into the core's one `OutputFormat`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from asgi_llm.adapters.anthropic import messages as anthropic_messages
from asgi_llm.adapters.ollama import chat as ollama_chat
from asgi_llm.adapters.ollama import generate as ollama_generate
from asgi_llm.adapters.openai import chat as openai_chat
from asgi_llm.adapters.openai.responses import routes as openai_responses
from asgi_llm.core import InvalidRequest, OutputFormat, Unsupported

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
HI = [{"role": "user", "content": "hi"}]


def chat(**fields: Any) -> dict[str, Any]:
    return {"model": "m", "messages": HI, **fields}


def responses(**fields: Any) -> dict[str, Any]:
    return {"model": "m", "input": "hi", **fields}


def anthropic(**fields: Any) -> dict[str, Any]:
    return {"model": "m", "max_tokens": 16, "messages": HI, **fields}


def generate(**fields: Any) -> dict[str, Any]:
    return {"model": "m", "prompt": "hi", **fields}


Parse = Callable[[Any], Any]

PARSED = [
    pytest.param(openai_chat.parse, chat(), None, id="chat-none"),
    pytest.param(openai_chat.parse, chat(response_format={"type": "text"}), None, id="chat-text"),
    pytest.param(
        openai_chat.parse,
        chat(response_format={"type": "json_object"}),
        OutputFormat("json_object", "response_format"),
        id="chat-json-object",
    ),
    pytest.param(
        openai_chat.parse,
        chat(
            response_format={"type": "json_schema", "json_schema": {"name": "place", "schema": SCHEMA, "strict": True}}
        ),
        OutputFormat("json_schema", "response_format.json_schema.schema", SCHEMA, "place", True),
        id="chat-json-schema",
    ),
    pytest.param(
        openai_chat.parse,
        chat(response_format={"type": "json_schema", "json_schema": {"name": "anything"}}),
        OutputFormat("json_object", "response_format.json_schema"),
        id="chat-json-schema-without-schema",
    ),
    pytest.param(openai_responses.parse, responses(text={"format": {"type": "text"}}), None, id="responses-text"),
    pytest.param(
        openai_responses.parse,
        responses(text={"format": {"type": "json_object"}}),
        OutputFormat("json_object", "text.format"),
        id="responses-json-object",
    ),
    pytest.param(
        openai_responses.parse,
        responses(text={"format": {"type": "json_schema", "name": "place", "schema": SCHEMA}}),
        OutputFormat("json_schema", "text.format.schema", SCHEMA, "place"),
        id="responses-json-schema",
    ),
    pytest.param(ollama_chat.parse, chat(format=""), None, id="ollama-chat-empty"),
    pytest.param(ollama_chat.parse, chat(format="json"), OutputFormat("json_object", "format"), id="ollama-chat-json"),
    pytest.param(
        ollama_chat.parse, chat(format=SCHEMA), OutputFormat("json_schema", "format", SCHEMA), id="ollama-chat-schema"
    ),
    pytest.param(
        ollama_generate.parse, generate(format="json"), OutputFormat("json_object", "format"), id="ollama-generate-json"
    ),
    pytest.param(
        ollama_generate.parse,
        generate(format=SCHEMA, raw=True),
        OutputFormat("json_schema", "format", SCHEMA),
        id="ollama-generate-raw-schema",
    ),
    pytest.param(
        anthropic_messages.parse,
        anthropic(output_config={"format": {"type": "json_schema", "schema": SCHEMA}}),
        OutputFormat("json_schema", "output_config.format.schema", SCHEMA),
        id="anthropic-output-config",
    ),
    pytest.param(
        anthropic_messages.parse,
        anthropic(output_format={"type": "json_schema", "schema": SCHEMA}),
        OutputFormat("json_schema", "output_format.schema", SCHEMA),
        id="anthropic-output-format-beta",
    ),
    pytest.param(
        anthropic_messages.parse_count,
        {"model": "m", "messages": HI, "output_format": {"type": "json_schema", "schema": SCHEMA}},
        OutputFormat("json_schema", "output_format.schema", SCHEMA),
        id="anthropic-count-tokens",
    ),
]


@pytest.mark.parametrize(("parse", "body", "expected"), PARSED)
def test_output_format_is_parsed(parse: Parse, body: dict[str, Any], expected: OutputFormat | None) -> None:
    assert parse(body).request.sampling.output_format == expected


BAD_SCHEMA = {"type": "object", "properties": {"n": {"type": "integer", "minimum": "one"}}}

INVALID = [
    pytest.param(openai_chat.parse, chat(response_format={"type": "xml"}), "response_format.type", id="chat-type"),
    pytest.param(
        openai_chat.parse,
        chat(response_format={"type": "json_schema"}),
        "response_format.json_schema",
        id="chat-missing-json-schema",
    ),
    pytest.param(
        openai_chat.parse,
        chat(response_format={"type": "json_schema", "json_schema": {"schema": SCHEMA}}),
        "response_format.json_schema.name",
        id="chat-missing-name",
    ),
    pytest.param(
        openai_chat.parse,
        chat(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": BAD_SCHEMA}}),
        "response_format.json_schema.schema",
        id="chat-invalid-schema",
    ),
    pytest.param(
        openai_chat.parse,
        chat(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": [1]}}),
        "response_format.json_schema.schema",
        id="chat-schema-not-object",
    ),
    pytest.param(
        openai_responses.parse, responses(text={"format": {"type": "xml"}}), "text.format.type", id="resp-type"
    ),
    pytest.param(
        openai_responses.parse,
        responses(text={"format": {"type": "json_schema", "schema": SCHEMA}}),
        "text.format.name",
        id="resp-missing-name",
    ),
    pytest.param(
        openai_responses.parse,
        responses(text={"format": {"type": "json_schema", "name": "x"}}),
        "text.format.schema",
        id="resp-missing-schema",
    ),
    pytest.param(
        openai_responses.parse_count,
        responses(text={"format": {"type": "json_schema", "name": "x", "schema": BAD_SCHEMA}}),
        "text.format.schema",
        id="resp-count-invalid-schema",
    ),
    pytest.param(ollama_chat.parse, chat(format="yaml"), "format", id="ollama-chat-word"),
    pytest.param(ollama_chat.parse, chat(format={"$schema": [1]}), "format", id="ollama-chat-schema-uri-list"),
    pytest.param(ollama_generate.parse, generate(format=BAD_SCHEMA), "format", id="ollama-generate-invalid-schema"),
    pytest.param(
        anthropic_messages.parse,
        anthropic(output_format={"type": "json", "schema": SCHEMA}),
        "output_format.type",
        id="anthropic-type",
    ),
    pytest.param(
        anthropic_messages.parse,
        anthropic(output_config={"format": {"type": "json_schema"}}),
        "output_config.format.schema",
        id="anthropic-missing-schema",
    ),
    pytest.param(
        anthropic_messages.parse,
        anthropic(output_config={"format": {"type": "json_schema", "schema": BAD_SCHEMA}}),
        "output_config.format.schema",
        id="anthropic-invalid-schema",
    ),
    pytest.param(
        anthropic_messages.parse,
        anthropic(
            output_config={"format": {"type": "json_schema", "schema": SCHEMA}},
            output_format={"type": "json_schema", "schema": SCHEMA},
        ),
        "output_format",
        id="anthropic-both",
    ),
]


@pytest.mark.parametrize(("parse", "body", "param"), INVALID)
def test_bad_output_formats_are_400_naming_the_param(parse: Parse, body: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse(body)
    assert (caught.value.param, caught.value.status) == (param, 400)
    assert not isinstance(caught.value, Unsupported)


def test_responses_echo_the_text_format() -> None:
    fmt = {"type": "json_schema", "name": "place", "schema": SCHEMA, "strict": True, "description": "A place."}
    parsed = openai_responses.parse(responses(text={"format": fmt}))
    assert parsed.options.echo["text"] == {"format": fmt}
    parsed = openai_responses.parse(responses(text={"format": {"type": "json_object"}}))
    assert parsed.options.echo["text"] == {"format": {"type": "json_object"}}


NO_SUCH_TYPE = {"type": "no-such-type"}
FUNCTION = {"name": "f", "parameters": NO_SUCH_TYPE}
BAD_TOOLS = [
    pytest.param(
        openai_chat.parse,
        chat(tools=[{"type": "function", "function": {"name": "ok"}}, {"type": "function", "function": FUNCTION}]),
        "tools[1].function.parameters",
        id="chat",
    ),
    pytest.param(
        openai_responses.parse, responses(tools=[{"type": "function", **FUNCTION}]), "tools[0].parameters", id="resp"
    ),
    pytest.param(
        anthropic_messages.parse,
        anthropic(tools=[{"name": "f", "input_schema": NO_SUCH_TYPE}]),
        "tools[0].input_schema",
        id="anthropic",
    ),
    pytest.param(
        ollama_chat.parse,
        chat(tools=[{"type": "function", "function": FUNCTION}]),
        "tools[0].function.parameters",
        id="ollama",
    ),
]


@pytest.mark.parametrize(("parse", "body", "param"), BAD_TOOLS)
def test_tool_parameters_off_the_meta_schema_are_refused(parse: Parse, body: dict[str, Any], param: str) -> None:
    """Whatever the tool choice (here `auto`, or none given): a schema that is no schema is refused."""
    with pytest.raises(InvalidRequest) as caught:
        parse(body)
    assert caught.value.param == param
    assert "no-such-type" in str(caught.value)
