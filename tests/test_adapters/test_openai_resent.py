"""What real clients send back to the OpenAI endpoints (this server's own replies, the openai
SDK's parsed results and stream accumulator, LiteLLM's and Codex's defaults) is read, inert
where it says nothing the request does not already say, or refused naming it: never refused as
an unknown key, never accepted and ignored."""

from __future__ import annotations

from typing import Any

import pytest

from asgi_llm.adapters.base import Meta
from asgi_llm.adapters.openai import chat as openai_chat
from asgi_llm.adapters.openai import completions as openai_completions
from asgi_llm.adapters.openai.responses import routes as openai_responses
from asgi_llm.core import Finish, InvalidRequest, ReasoningDelta, TextDelta, Usage

USER = {"role": "user", "content": "hi"}
CALL = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}


def chat(*messages: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [USER, *messages], **fields}


def responses(**fields: Any) -> dict[str, Any]:
    return {"model": "m", "input": "hi", **fields}


def refused(parse: Any, body: dict[str, Any]) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as caught:
        parse(body)
    assert caught.value.status == 400 and "Unrecognized parameter" not in caught.value.message
    return caught.value


# -- chat: an assistant's turn sent back ------------------------------------------------------


INERT_ON_ASSISTANT = [
    pytest.param({"tool_calls": [{**CALL, "index": 0}]}, id="tool-call-index"),
    pytest.param({"parsed": {"a": 1}}, id="parsed"),
    pytest.param(
        {"tool_calls": [{**CALL, "function": {**CALL["function"], "parsed_arguments": {"a": 1}}}]},
        id="parsed-arguments",
    ),
    pytest.param({"annotations": []}, id="annotations"),
]


@pytest.mark.parametrize("extra", INERT_ON_ASSISTANT)
def test_what_the_sdk_keeps_on_an_assistant_turn_is_inert(extra: dict[str, Any]) -> None:
    turn = {"role": "assistant", "content": "ok", "tool_calls": [CALL], **extra}
    plain = {"role": "assistant", "content": "ok", "tool_calls": [CALL]}
    assert openai_chat.parse(chat(turn, {"role": "tool", "tool_call_id": "call_1", "content": "1"})) == (
        openai_chat.parse(chat(plain, {"role": "tool", "tool_call_id": "call_1", "content": "1"}))
    )


@pytest.mark.parametrize("name", ["reasoning_content", "reasoning"])
def test_an_assistants_reasoning_by_either_name_is_its_turns_reasoning(name: str) -> None:
    parsed = openai_chat.parse(chat({"role": "assistant", "content": "4", name: "2+2 is 4"}, USER))
    assert parsed.request.messages[1].reasoning == "2+2 is 4"
    assert parsed.request.messages[1].content == "4"


def test_both_reasoning_names_on_one_turn_are_refused() -> None:
    turn = {"role": "assistant", "content": "4", "reasoning": "a", "reasoning_content": "a"}
    assert refused(openai_chat.parse, chat(turn, USER)).param == "messages[1].reasoning"


@pytest.mark.parametrize(
    ("name", "value"), [("reasoning_content", "a"), ("reasoning", "a"), ("parsed", {}), ("annotations", [1])]
)
def test_an_assistants_fields_on_a_users_turn_are_refused(name: str, value: Any) -> None:
    error = refused(openai_chat.parse, {"model": "m", "messages": [{**USER, name: value}]})
    assert error.param == f"messages[0].{name}"


def test_an_assistants_refusal_part_is_its_words() -> None:
    turn = {"role": "assistant", "content": [{"type": "refusal", "refusal": "no"}]}
    assert openai_chat.parse(chat(turn, USER)).request.messages[1].content == "no"


@pytest.mark.parametrize(("content", "said"), [(None, "I can't."), ("", "I can't."), ("Well.", "Well.\nI can't.")])
def test_an_assistants_refusal_beside_its_content_is_its_words(content: str | None, said: str) -> None:
    turn = {"role": "assistant", "content": content, "refusal": "I can't."}
    assert openai_chat.parse(chat(turn, USER)).request.messages[1].content == said
    assert (
        refused(openai_chat.parse, {"model": "m", "messages": [{**USER, "refusal": "no"}]}).param
        == "messages[0].refusal"
    )


def test_a_refusal_part_elsewhere_is_refused_by_its_type() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": [{"type": "refusal", "refusal": "no"}]}]}
    assert refused(openai_chat.parse, body).param == "messages[0].content[0].type"


def test_another_part_types_field_on_a_part_is_refused() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "a", "refusal": "b"}]}]}
    assert refused(openai_chat.parse, body).param == "messages[0].content[0].refusal"


# -- chat: cache_control, as LiteLLM and Cline send it ----------------------------------------

EPHEMERAL = {"type": "ephemeral"}


def test_an_ephemeral_breakpoint_on_a_part_or_a_message_is_inert() -> None:
    marked = {
        "model": "m",
        "messages": [
            {"role": "system", "content": "Be brief.", "cache_control": EPHEMERAL},
            {"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": EPHEMERAL}]},
        ],
    }
    plain = {"model": "m", "messages": [{"role": "system", "content": "Be brief."}, USER]}
    assert openai_chat.parse(marked) == openai_chat.parse(plain)


@pytest.mark.parametrize(
    ("control", "param"),
    [({"type": "persistent"}, "cache_control.type"), ({**EPHEMERAL, "ttl": "5m"}, "cache_control.ttl")],
)
def test_another_cache_control_shape_is_refused_naming_it(control: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        openai_chat.parse({"model": "m", "messages": [{**USER, "cache_control": control}]})
    assert caught.value.param == f"messages[0].{param}"


# -- chat and Responses: the top-level service fields -----------------------------------------

HONOURED_AS_SERVED = [
    pytest.param({"store": False}, id="store-false"),
    pytest.param({"service_tier": "auto"}, id="tier-auto"),
    pytest.param({"service_tier": "default"}, id="tier-default"),
    pytest.param({"prompt_cache_key": "k"}, id="prompt-cache-key"),
    pytest.param({"prompt_cache_retention": "in_memory"}, id="retention-in-memory"),
]


@pytest.mark.parametrize("fields", HONOURED_AS_SERVED)
def test_chat_takes_what_this_server_does_anyway(fields: dict[str, Any]) -> None:
    assert openai_chat.parse(chat(**fields)) == openai_chat.parse(chat())


REFUSED_SERVICE = [
    pytest.param({"service_tier": "flex"}, "service_tier", id="tier-flex"),
    pytest.param({"service_tier": "priority"}, "service_tier", id="tier-priority"),
    pytest.param({"prompt_cache_retention": "24h"}, "prompt_cache_retention", id="retention-24h"),
    pytest.param({"user": "a", "safety_identifier": "b"}, "safety_identifier", id="two-users"),
]


@pytest.mark.parametrize(("fields", "param"), REFUSED_SERVICE)
def test_chat_and_responses_refuse_what_they_cannot_do(fields: dict[str, Any], param: str) -> None:
    assert refused(openai_chat.parse, chat(**fields)).param == param
    assert refused(openai_responses.parse, responses(**fields)).param == param


def test_chat_refuses_store_true_and_metadata() -> None:
    assert refused(openai_chat.parse, chat(store=True)).param == "store"
    with pytest.raises(InvalidRequest) as caught:
        openai_chat.parse(chat(metadata={"k": "v"}))
    assert caught.value.param == "metadata"


@pytest.mark.parametrize(("parse", "body"), [(openai_chat.parse, chat), (openai_responses.parse, responses)])
def test_a_safety_identifier_is_the_requests_user(parse: Any, body: Any) -> None:
    assert parse(body(safety_identifier="s-1")).request.user == "s-1"
    assert parse(body(safety_identifier="s-1", user="s-1")).request.user == "s-1"


def test_responses_take_a_tier_and_a_retention_and_echo_them() -> None:
    parsed = openai_responses.parse(responses(service_tier="auto", prompt_cache_retention="in_memory"))
    assert parsed.request == openai_responses.parse(responses()).request
    assert parsed.options.echo["service_tier"] == "default"
    assert parsed.options.echo["prompt_cache_retention"] == "in_memory"


@pytest.mark.parametrize("parse", [openai_chat.parse, openai_completions.parse])
def test_stream_obfuscation_off_is_honoured_and_on_is_refused(parse: Any) -> None:
    body = chat() if parse is openai_chat.parse else {"model": "m", "prompt": "hi"}
    off = parse({**body, "stream": True, "stream_options": {"include_obfuscation": False}})
    assert off == parse({**body, "stream": True})
    error = refused(parse, {**body, "stream": True, "stream_options": {"include_obfuscation": True}})
    assert error.param == "stream_options.include_obfuscation"


# -- Responses: items and settings sent back --------------------------------------------------


def test_an_assistant_items_phase_is_inert_and_belongs_on_an_assistants() -> None:
    said = {"role": "assistant", "content": [{"type": "output_text", "text": "ok"}]}
    items = [{"role": "user", "content": "hi"}, {**said, "phase": "final_answer"}, {"role": "user", "content": "go"}]
    plain = [{"role": "user", "content": "hi"}, said, {"role": "user", "content": "go"}]
    parse = openai_responses.parse
    assert parse(responses(input=items)).request == parse(responses(input=plain)).request
    error = refused(parse, responses(input=[{"role": "user", "content": "hi", "phase": "commentary"}]))
    assert error.param == "input[0].phase"


def test_an_assistant_items_refusal_part_is_its_words() -> None:
    items = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "refusal", "refusal": "no"}]},
        {"role": "user", "content": "why"},
    ]
    assert openai_responses.parse(responses(input=items)).request.messages[1].content == "no"
    error = refused(openai_responses.parse, responses(input=[{"role": "user", "content": [items[1]["content"][0]]}]))
    assert error.param == "input[0].content[0].type"


def test_an_input_file_part_is_refused_by_its_type() -> None:
    part = {"type": "input_file", "file_data": "data:application/pdf;base64,eA==", "filename": "a.pdf"}
    for extra in ({}, {"file_url": "https://example.com/a.pdf"}):
        error = refused(openai_responses.parse, responses(input=[{"role": "user", "content": [{**part, **extra}]}]))
        assert error.param == "input[0].content[0].type"
        assert error.message == "Content part type 'input_file' is not supported here."


def test_a_tool_loaded_up_front_is_taken_and_a_deferred_one_refused() -> None:
    tool = {"type": "function", "name": "f", "parameters": {"type": "object"}}
    parse = openai_responses.parse
    assert parse(responses(tools=[{**tool, "defer_loading": False}])) == parse(responses(tools=[tool]))
    assert refused(parse, responses(tools=[{**tool, "defer_loading": True}])).param == "tools[0].defer_loading"


def test_an_automatic_summary_and_medium_verbosity_are_taken_and_echoed() -> None:
    parsed = openai_responses.parse(
        responses(reasoning={"effort": "high", "summary": "auto"}, text={"verbosity": "medium"})
    )
    assert parsed.request == openai_responses.parse(responses(reasoning={"effort": "high"})).request
    assert parsed.options.echo["reasoning"] == {"effort": "high", "summary": "auto"}
    assert parsed.options.echo["text"]["verbosity"] == "medium"
    for fields, param in [
        ({"reasoning": {"summary": "detailed"}}, "reasoning.summary"),
        ({"reasoning": {"summary": "concise"}}, "reasoning.summary"),
        ({"text": {"verbosity": "low"}}, "text.verbosity"),
        ({"text": {"verbosity": "high"}}, "text.verbosity"),
    ]:
        assert refused(openai_responses.parse, responses(**fields)).param == param


def test_with_an_automatic_summary_the_reasoning_items_summary_stays_empty() -> None:
    parsed = openai_responses.parse(responses(reasoning={"effort": "high", "summary": "auto"}))
    meta = Meta(request_id="0123456789abcdef01234567", created=0, model="m")
    events = [ReasoningDelta("think"), TextDelta("ok"), Finish("stop", Usage(1, 2))]
    reply = openai_responses.render(parsed, meta, events)
    [thought] = [item for item in reply["output"] if item["type"] == "reasoning"]
    assert thought["summary"] == [] and thought["content"] == [{"type": "reasoning_text", "text": "think"}]
