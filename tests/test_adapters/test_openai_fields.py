"""OpenAI chat, completions and embeddings: a null is a field not sent; each field is honoured or
refused naming it, with a message that says what is wrong."""

from __future__ import annotations

from typing import Any

import pytest

from asgi_llm.adapters.openai import chat as openai_chat
from asgi_llm.adapters.openai import completions as openai_completions
from asgi_llm.adapters.openai import embeddings as openai_embeddings
from asgi_llm.core import InvalidRequest

USER = {"role": "user", "content": "hi"}
CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
TOOL = {"type": "function", "function": {"name": "get_weather", "description": "d", "parameters": {"type": "object"}}}


def chat(**fields: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [USER], **fields}


def completion(**fields: Any) -> dict[str, Any]:
    return {"model": "m", "prompt": "Once", **fields}


def embedding(**fields: Any) -> dict[str, Any]:
    return {"model": "m", "input": "hello", **fields}


def refusal(adapter: Any, body: dict[str, Any]) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as caught:
        adapter.parse(body)
    assert caught.value.status == 400
    return caught.value


# -- a null is a field not sent ----------------------------------------------------------------

BODIES = [
    pytest.param(openai_chat, chat(), id="chat"),
    pytest.param(openai_completions, completion(), id="completions"),
    pytest.param(openai_embeddings, embedding(), id="embeddings"),
]


@pytest.mark.parametrize(("adapter", "body"), BODIES)
def test_every_optional_top_level_field_sent_as_null_parses_as_if_absent(adapter: Any, body: dict[str, Any]) -> None:
    fields = adapter.ROUTE.body.model_fields
    alone = adapter.parse(body)
    for name in fields.keys() - body.keys():
        assert adapter.parse({**body, name: None}) == alone, name


@pytest.mark.parametrize(("adapter", "body"), BODIES)
def test_a_required_field_sent_as_null_is_missing(adapter: Any, body: dict[str, Any]) -> None:
    for name in body:
        error = refusal(adapter, {**body, name: None})
        assert (error.param, error.message) == (name, f"Missing required parameter: '{name}'.")


def test_nulls_take_the_defaults_the_spec_gives() -> None:
    assert openai_completions.parse(completion(max_tokens=None)).request.sampling.max_tokens == 16
    assert openai_embeddings.parse(embedding(encoding_format=None)).options == "float"
    streamed = openai_chat.parse(chat(stream=True, stream_options={"include_usage": None}))
    assert streamed.stream and streamed.options.include_usage is False


def test_nested_nulls_are_not_sent_either() -> None:
    messages = [
        {**USER, "name": None, "tool_calls": None, "tool_call_id": None},
        {"role": "assistant", "content": None, "tool_calls": [{**CALL, "type": None}]},
        {"role": "tool", "content": "42", "tool_call_id": "call_1", "name": None},
    ]
    tools = [{"type": "function", "function": {"name": "f", "description": None, "parameters": None, "strict": None}}]
    fmt = {"type": "json_schema", "json_schema": {"name": "out", "description": None, "schema": None, "strict": None}}
    request = openai_chat.parse(chat(messages=messages, tools=tools, response_format=fmt)).request
    assert request.messages[1].tool_calls[0].name == "get_weather"
    assert request.tools[0].description is None and request.tools[0].parameters == {}
    assert request.sampling.output_format is not None and request.sampling.output_format.kind == "json_object"


# -- logit_bias ---------------------------------------------------------------------------------


@pytest.mark.parametrize("adapter", [openai_chat, openai_completions])
@pytest.mark.parametrize("key", ["²", "٣", "３", "1²"])
def test_logit_bias_keys_are_ascii_decimal_token_ids(adapter: Any, key: str) -> None:
    body = chat(logit_bias={key: 5}) if adapter is openai_chat else completion(logit_bias={key: 5})
    error = refusal(adapter, body)
    assert error.param == "logit_bias" and repr(key) in error.message


def test_an_ascii_token_id_is_biased() -> None:
    assert openai_chat.parse(chat(logit_bias={"3": 100})).request.sampling.logit_bias == ((3, 100.0),)


# -- stream_options -------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [{}, {"stream": False}])
@pytest.mark.parametrize(("adapter", "body"), BODIES[:2])
def test_stream_options_without_stream_is_refused(adapter: Any, body: dict[str, Any], stream: dict[str, Any]) -> None:
    error = refusal(adapter, {**body, **stream, "stream_options": {"include_usage": True}})
    assert error.param == "stream_options" and "'stream' is true" in error.message


@pytest.mark.parametrize(("adapter", "body"), BODIES[:2])
def test_stream_options_with_stream_is_honoured(adapter: Any, body: dict[str, Any]) -> None:
    parsed = adapter.parse({**body, "stream": True, "stream_options": {"include_usage": True}})
    assert parsed.stream and parsed.options.include_usage


# -- seed -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [2**63, -(2**63) - 1, 2**64 + 1, 2**70])
@pytest.mark.parametrize(("adapter", "body"), BODIES[:2])
def test_a_seed_outside_int64_is_refused(adapter: Any, body: dict[str, Any], seed: int) -> None:
    assert refusal(adapter, {**body, "seed": seed}).param == "seed"


@pytest.mark.parametrize("seed", [2**63 - 1, -(2**63), 4294967297, 0])
def test_an_int64_seed_reaches_the_sampler_whole(seed: int) -> None:
    assert openai_completions.parse(completion(seed=seed)).request.sampling.seed == seed


# -- choices on /completions ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("prompts", "n", "param"),
    [(20, None, "prompt"), (17, 1, "prompt"), (4, 5, "n"), (2, 16, "n")],
)
def test_completions_make_at_most_16_choices(prompts: int, n: int | None, param: str) -> None:
    error = refusal(openai_completions, completion(prompt=["x"] * prompts, n=n))
    assert error.param == param and "at most 16 choices" in error.message
    assert f"{prompts} × {n or 1} = {prompts * (n or 1)}" in error.message


@pytest.mark.parametrize(("prompts", "n"), [(16, 1), (8, 2), (1, 16)])
def test_completions_up_to_16_choices_are_made(prompts: int, n: int) -> None:
    request = openai_completions.parse(completion(prompt=["x"] * prompts, n=n)).request
    assert len(request.prompts) * request.n == prompts * n


# -- messages that say what is wrong --------------------------------------------------------------


@pytest.mark.parametrize(
    ("adapter", "body", "param", "says"),
    [
        (openai_chat, chat(stop=["a"] * 17), "stop", "at most 16 stop sequences are taken; got 17"),
        (openai_completions, completion(stop=["a", 3]), "stop", "item 1 is an integer"),
        (openai_chat, chat(stop=5), "stop", "expected a string or a list of strings; got an integer"),
        (openai_completions, completion(prompt=[1, 2, "a"]), "prompt", "item 2 is a string but item 0 is a token id"),
        (openai_completions, completion(prompt=[[1], [2, 1.5]]), "prompt", "item [1][1] is a number, not a token id"),
        (openai_completions, completion(prompt=[True]), "prompt", "item 0 is a boolean"),
        (openai_embeddings, embedding(input={"text": "x"}), "input", "got an object"),
        (openai_embeddings, embedding(input=["a", ["b"]]), "input", "item 1 is a list of token ids but item 0"),
    ],
)
def test_a_bad_list_says_what_is_wrong_with_it(adapter: Any, body: dict[str, Any], param: str, says: str) -> None:
    error = refusal(adapter, body)
    assert error.param == param and says in error.message
    assert "valid string" not in error.message


@pytest.mark.parametrize("role", ["system", "developer", "user", "tool"])
@pytest.mark.parametrize(("content", "says"), [({}, "Missing required parameter"), ({"content": []}, "is empty")])
def test_a_message_but_an_assistants_needs_content(role: str, content: dict[str, Any], says: str) -> None:
    message = {"role": role, **content, **({"tool_call_id": "call_1"} if role == "tool" else {})}
    error = refusal(openai_chat, chat(messages=[USER, message]))
    assert error.param == "messages[1].content" and says in error.message


def test_an_assistant_turn_may_be_calls_alone_and_an_empty_string_is_content() -> None:
    messages = [{"role": "user", "content": ""}, {"role": "assistant", "tool_calls": [CALL]}]
    request = openai_chat.parse(chat(messages=[*messages, {"role": "tool", "content": "", "tool_call_id": "call_1"}]))
    assert [m.content for m in request.request.messages] == ["", "", ""]


# -- each role's own fields -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "param"),
    [
        ({**USER, "tool_calls": [CALL]}, "messages[0].tool_calls"),
        ({"role": "tool", "content": "42", "tool_call_id": "c", "tool_calls": [CALL]}, "messages[0].tool_calls"),
        ({**USER, "tool_call_id": "call_1"}, "messages[0].tool_call_id"),
        ({"role": "system", "content": "Be brief.", "tool_call_id": "call_1"}, "messages[0].tool_call_id"),
        ({"role": "assistant", "content": "ok", "tool_call_id": "call_1"}, "messages[0].tool_call_id"),
    ],
)
def test_calls_and_call_ids_outside_their_roles_are_refused(message: dict[str, Any], param: str) -> None:
    assert refusal(openai_chat, chat(messages=[message, USER])).param == param


def test_a_messages_name_reaches_the_core() -> None:
    request = openai_chat.parse(chat(messages=[{**USER, "name": "alice"}])).request
    assert request.messages[0].name == "alice"  # and the template (tests/test_llamacpp/test_prompt_history.py)


# -- names and the response format ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("names", "param", "says"),
    [
        (["get_weather", "get_weather"], "tools[1].function.name", "given twice"),
        (["ok", "get weather"], "tools[1].function.name", "1 to 64 letters"),
        (["x" * 65], "tools[0].function.name", "1 to 64 letters"),
        ([""], "tools[0].function.name", "1 to 64 letters"),
    ],
)
def test_tool_names_are_distinct_and_well_formed(names: list[str], param: str, says: str) -> None:
    tools = [{"type": "function", "function": {"name": name}} for name in names]
    error = refusal(openai_chat, chat(tools=tools))
    assert error.param == param and says in error.message


@pytest.mark.parametrize("name", ["a.b", "", "x" * 65, "café"])
def test_a_format_name_is_spelled_as_a_tools(name: str) -> None:
    fmt = {"type": "json_schema", "json_schema": {"name": name, "schema": {"type": "object"}}}
    assert refusal(openai_chat, chat(response_format=fmt)).param == "response_format.json_schema.name"


def test_a_json_schema_under_another_type_is_refused() -> None:
    fmt = {"type": "json_object", "json_schema": {"name": "out", "schema": {"type": "object"}}}
    assert refusal(openai_chat, chat(response_format=fmt)).param == "response_format.json_schema"


def fmt(description: str) -> dict[str, Any]:
    spec = {"name": "weather", "description": description, "schema": {"type": "object"}}
    return {"type": "json_schema", "json_schema": spec}


def test_a_format_description_is_told_to_the_model_in_a_system_message() -> None:
    request = openai_chat.parse(chat(response_format=fmt("Today's weather in one city."))).request
    note = "Answer in the JSON format 'weather': Today's weather in one city."
    assert [(m.role, m.content) for m in request.messages] == [("system", note), ("user", "hi")]


def test_a_format_description_ends_the_system_message_there_is() -> None:
    messages = [{"role": "developer", "content": "Be brief."}, USER]
    request = openai_chat.parse(chat(messages=messages, response_format=fmt("A report."))).request
    assert request.messages[0].content == "Be brief.\n\nAnswer in the JSON format 'weather': A report."
    assert [m.role for m in request.messages] == ["system", "user"]


def test_without_a_description_the_messages_are_as_sent() -> None:
    fmt = {"type": "json_schema", "json_schema": {"name": "weather", "schema": {"type": "object"}}}
    assert [m.role for m in openai_chat.parse(chat(response_format=fmt)).request.messages] == ["user"]
