"""The Anthropic adapter's parse rules and error envelope: bad requests name one `param`."""

from __future__ import annotations

import json
from typing import Any

import pytest
from anthropic.types import RawMessageStreamEvent
from anthropic.types.shared import ErrorResponse
from pydantic import TypeAdapter

from asgi_llm.adapters.anthropic import ANTHROPIC
from asgi_llm.adapters.anthropic import (
    common as anthropic_common,
)
from asgi_llm.adapters.anthropic import (
    messages as anthropic_messages,
)
from asgi_llm.adapters.anthropic import (
    stream as anthropic_stream,
)
from asgi_llm.adapters.base import Meta
from asgi_llm.core import (
    ContextOverflow,
    Finish,
    Forbidden,
    GenerationEvent,
    InternalError,
    InvalidRequest,
    LLMError,
    MethodNotAllowed,
    ModelNotFound,
    ModelNotReady,
    Overloaded,
    PayloadTooLarge,
    RateLimited,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    Unauthorized,
    Unsupported,
    Usage,
)

USER = [{"role": "user", "content": "hi"}]
TOOL = {"name": "f", "input_schema": {"type": "object"}}


def body(**fields: Any) -> dict[str, Any]:
    return {"model": "m", "max_tokens": 8, "messages": USER, **fields}


def user(*blocks: Any) -> dict[str, Any]:
    return body(messages=[{"role": "user", "content": list(blocks)}])


INVALID = [
    pytest.param({"model": "m", "messages": USER}, "max_tokens", id="missing-max-tokens"),
    pytest.param({"max_tokens": 8, "messages": USER}, "model", id="missing-model"),
    pytest.param({"model": "m", "max_tokens": 8}, "messages", id="missing-messages"),
    pytest.param(body(max_tokens=0), "max_tokens", id="max-tokens-zero"),
    pytest.param(body(max_tokens="8"), "max_tokens", id="max-tokens-str"),
    pytest.param(body(temperature=1.5), "temperature", id="temperature-above-one"),
    pytest.param(body(temperature="hot"), "temperature", id="temperature-str"),
    pytest.param(body(top_k=-1), "top_k", id="top-k-negative"),
    pytest.param(body(stop_sequences="END"), "stop_sequences", id="stop-sequences-str"),
    pytest.param(body(stream="yes"), "stream", id="stream-str"),
    pytest.param(body(metadata={"user_id": 5}), "metadata.user_id", id="metadata-user-id"),
    pytest.param(body(messages=[]), "messages", id="messages-empty"),
    pytest.param(body(messages="hi"), "messages", id="messages-str"),
    pytest.param(body(messages=[{"role": "system", "content": "x"}]), "messages[0].role", id="role-system"),
    pytest.param(body(messages=[{"role": "bot", "content": "x"}]), "messages[0].role", id="role-unknown"),
    pytest.param(body(messages=[*USER, {"role": "assistant", "content": 5}]), "messages[1].content", id="content-int"),
    pytest.param(user({"type": "text", "text": 5}), "messages[0].content[0].text", id="text-int"),
    pytest.param(user({"type": "text"}), "messages[0].content[0].text", id="text-missing"),
    pytest.param(user({"text": "hi"}), "messages[0].content[0].type", id="block-type-missing"),
    pytest.param(user({"type": "tool_result"}), "messages[0].content[0].tool_use_id", id="tool-result-id-missing"),
    pytest.param(
        user({"type": "tool_use", "id": "t", "name": "f", "input": {}}),
        "messages[0].content[0].type",
        id="tool-use-in-user-turn",
    ),
    pytest.param(
        body(messages=[*USER, {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f"}]}]),
        "messages[1].content[0].input",
        id="tool-use-input-missing",
    ),
    pytest.param(
        body(
            messages=[
                *USER,
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": "{}"}]},
            ]
        ),
        "messages[1].content[0].input",
        id="tool-use-input-str",
    ),
    pytest.param(body(system=5), "system", id="system-int"),
    pytest.param(body(system=[{"type": "text"}]), "system[0].text", id="system-block-text-missing"),
    pytest.param(body(tools=[{"name": "f"}]), "tools[0].input_schema", id="tool-without-schema"),
    pytest.param(body(tools=[{"input_schema": {}}]), "tools[0].name", id="tool-without-name"),
    pytest.param(body(tool_choice={"type": "sometimes"}), "tool_choice.type", id="tool-choice-type"),
    pytest.param(body(tools=[TOOL], tool_choice={"type": "tool"}), "tool_choice.name", id="tool-choice-name-missing"),
    pytest.param(
        body(tools=[TOOL], tool_choice={"type": "tool", "name": "g"}), "tool_choice.name", id="tool-choice-unknown"
    ),
    pytest.param(body(thinking={"type": "enabled"}), "thinking.budget_tokens", id="thinking-budget-missing"),
    pytest.param(
        body(thinking={"type": "enabled", "budget_tokens": 10}), "thinking.budget_tokens", id="thinking-budget-small"
    ),
    pytest.param(
        body(max_tokens=1024, thinking={"type": "enabled", "budget_tokens": 1024}),
        "thinking.budget_tokens",
        id="thinking-budget-not-below-max-tokens",
    ),
    pytest.param(body(thinking={"type": "sometimes"}), "thinking.type", id="thinking-type"),
    pytest.param(body(cache_control="ephemeral"), "cache_control", id="cache-control-str"),
    pytest.param(body(cache_control={"ttl": "5m"}), "cache_control.type", id="cache-control-type-missing"),
    pytest.param(body(cache_control={"type": "persistent"}), "cache_control.type", id="cache-control-type"),
    pytest.param(body(cache_control={"type": "ephemeral", "ttl": "2h"}), "cache_control.ttl", id="cache-control-ttl"),
    pytest.param(
        body(cache_control={"type": "ephemeral", "scope": "global"}), "cache_control.scope", id="cache-control-unknown"
    ),
    pytest.param(
        user({"type": "text", "text": "hi", "cache_control": {"type": "persistent"}}),
        "messages[0].content[0].cache_control.type",
        id="block-cache-control-type",
    ),
    pytest.param(
        user({"type": "text", "text": "hi", "cache_control": {"type": "ephemeral", "ttl": "2h"}}),
        "messages[0].content[0].cache_control.ttl",
        id="block-cache-control-ttl",
    ),
    pytest.param(
        user({"type": "text", "text": "hi", "cache_control": {"type": "ephemeral", "scope": "global"}}),
        "messages[0].content[0].cache_control.scope",
        id="block-cache-control-unknown",
    ),
    pytest.param(
        user({"type": "text", "text": "hi", "cache_control": "ephemeral"}),
        "messages[0].content[0].cache_control",
        id="block-cache-control-str",
    ),
    pytest.param(
        body(system=[{"type": "text", "text": "s", "cache_control": {"type": "lasting"}}]),
        "system[0].cache_control.type",
        id="system-cache-control-type",
    ),
    pytest.param(
        body(tools=[{**TOOL, "cache_control": {"type": "bogus"}}]),
        "tools[0].cache_control.type",
        id="tool-cache-control",
    ),
    pytest.param(
        body(tools=[{**TOOL, "cache_control": {"type": "ephemeral", "scope": "g"}}]),
        "tools[0].cache_control.scope",
        id="tool-cache-control-unknown",
    ),
    pytest.param(
        user({"type": "tool_result", "tool_use_id": "t", "cache_control": {"type": "bogus"}}),
        "messages[0].content[0].cache_control.type",
        id="tool-result-cache-control",
    ),
    pytest.param(
        user(
            {
                "type": "tool_result",
                "tool_use_id": "t",
                "content": [{"type": "text", "text": "ok", "cache_control": {}}],
            }
        ),
        "messages[0].content[0].content[0].cache_control.type",
        id="tool-result-text-cache-control",
    ),
    pytest.param(
        user({"type": "image", "source": {"type": "url", "url": "https://x/a.png"}, "cache_control": {"type": "x"}}),
        "messages[0].content[0].cache_control.type",
        id="image-cache-control",
    ),
    pytest.param(
        body(
            messages=[
                *USER,
                {
                    "role": "assistant",
                    "content": [
                        {"type": "tool_use", "id": "t", "name": "f", "input": {}, "cache_control": {"type": "x"}}
                    ],
                },
            ]
        ),
        "messages[1].content[0].cache_control.type",
        id="tool-use-cache-control",
    ),
    pytest.param(
        body(
            messages=[
                *USER,
                {
                    "role": "assistant",
                    "content": [{"type": "thinking", "thinking": "t", "cache_control": {"type": "ephemeral"}}],
                },
            ]
        ),
        "messages[1].content[0].cache_control",
        id="thinking-cache-control",
    ),
    pytest.param(
        user({"type": "text", "text": "hi", "is_error": True}), "messages[0].content[0].is_error", id="text-is-error"
    ),
    pytest.param(
        user({"type": "tool_result", "tool_use_id": "t", "text": "ok"}),
        "messages[0].content[0].text",
        id="tool-result-text",
    ),
    pytest.param(
        user({"type": "image", "source": {"type": "url", "url": "https://x/a.png"}, "text": "a cat"}),
        "messages[0].content[0].text",
        id="image-text",
    ),
    pytest.param(
        body(messages=[*USER, {"role": "assistant", "content": [{"type": "text", "text": "a", "id": "t"}]}]),
        "messages[1].content[0].id",
        id="text-id",
    ),
    pytest.param(body(tool_choice={"type": "any"}), "tool_choice", id="tool-choice-any-without-tools"),
    pytest.param(body(tools=[], tool_choice={"type": "any"}), "tool_choice", id="tool-choice-any-empty-tools"),
    pytest.param(body(tool_choice={"type": "tool", "name": "f"}), "tool_choice", id="tool-choice-tool-without-tools"),
    pytest.param(
        body(tools=[TOOL], tool_choice={"type": "auto", "name": "f"}),
        "tool_choice.name",
        id="tool-choice-name-with-auto",
    ),
    pytest.param(
        body(tools=[TOOL], tool_choice={"type": "none", "disable_parallel_tool_use": True}),
        "tool_choice.disable_parallel_tool_use",
        id="tool-choice-none-parallel",
    ),
    pytest.param(
        body(thinking={"type": "disabled", "budget_tokens": 2048}),
        "thinking.budget_tokens",
        id="thinking-disabled-budget",
    ),
    pytest.param(
        body(thinking={"type": "adaptive", "budget_tokens": 2048}),
        "thinking.budget_tokens",
        id="thinking-adaptive-budget",
    ),
    pytest.param(body(service_tier="bogus"), "service_tier", id="service-tier"),
    pytest.param(body(service_tier=1), "service_tier", id="service-tier-int"),
    pytest.param(body(tools=[TOOL, TOOL]), "tools[1].name", id="tool-name-twice"),
    pytest.param(body(tools=[{**TOOL, "name": "bad name!"}]), "tools[0].name", id="tool-name-pattern"),
    pytest.param(body(tools=[{**TOOL, "name": "f" * 129}]), "tools[0].name", id="tool-name-too-long"),
]

UNSUPPORTED = [
    pytest.param(
        user({"type": "image", "source": {"type": "file", "file_id": "f"}}),
        "messages[0].content[0].source.type",
        id="image-file-source",
    ),
    pytest.param(
        body(messages=[*USER, {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "document"}]}]),
        "messages[1].content[1].type",
        id="document-second-block",
    ),
    pytest.param(
        user({"type": "tool_result", "tool_use_id": "t", "content": [{"type": "audio"}]}),
        "messages[0].content[0].content[0].type",
        id="audio-in-tool-result",
    ),
    pytest.param(body(system=[{"type": "audio"}]), "system[0].type", id="audio-in-system"),
    pytest.param(
        body(tools=[{"type": "web_search_20250305", "name": "web_search"}]), "tools[0].type", id="server-tool"
    ),
]


@pytest.mark.parametrize(("data", "param"), INVALID)
def test_invalid_request_names_param(data: Any, param: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        anthropic_messages.parse(data)
    assert caught.value.param == param
    assert caught.value.status == 400 and caught.value.message


@pytest.mark.parametrize(("data", "param"), UNSUPPORTED)
def test_unsupported_names_param(data: Any, param: str) -> None:
    with pytest.raises(Unsupported) as caught:
        anthropic_messages.parse(data)
    assert caught.value.param == param


@pytest.mark.parametrize(
    ("choice", "expected", "parallel"),
    [
        (None, "auto", True),
        ({"type": "auto"}, "auto", True),
        ({"type": "any"}, "required", True),
        ({"type": "none"}, "none", True),
        ({"type": "tool", "name": "f"}, "f", True),
        ({"type": "any", "disable_parallel_tool_use": True}, "required", False),
        ({"type": "auto", "disable_parallel_tool_use": False}, "auto", True),
    ],
)
def test_tool_choice(choice: dict[str, Any] | None, expected: str, parallel: bool) -> None:
    extra = {} if choice is None else {"tool_choice": choice}
    request = anthropic_messages.parse(body(tools=[TOOL], **extra)).request
    assert (request.tool_choice, request.parallel_tool_calls) == (expected, parallel)


@pytest.mark.parametrize("choice", [{"type": "auto"}, {"type": "none"}])
def test_tool_choice_auto_or_none_holds_without_tools(choice: dict[str, Any]) -> None:
    """No tool can be called either way: the choice is honoured as it stands."""
    request = anthropic_messages.parse(body(tool_choice=choice)).request
    assert (request.tools, request.tool_choice) == ((), choice["type"])


@pytest.mark.parametrize("tier", ["auto", "standard_only"])
def test_either_service_tier_is_served_by_the_one_standard_tier(tier: str) -> None:
    assert anthropic_messages.parse(body(service_tier=tier)).request == anthropic_messages.parse(body()).request


def test_tool_names_may_use_every_allowed_character() -> None:
    tools = [{**TOOL, "name": "get_weather-2"}, {**TOOL, "name": "F" * 64}]
    assert [t.name for t in anthropic_messages.parse(body(tools=tools)).request.tools] == ["get_weather-2", "F" * 64]


def test_cache_control_is_taken_wherever_anthropic_takes_it() -> None:
    """Every prefix is cached anyway: a breakpoint on a block or tool changes nothing the core gets."""
    cache = {"type": "ephemeral", "ttl": "1h"}
    marked = body(
        system=[{"type": "text", "text": "s", "cache_control": cache}],
        tools=[{**TOOL, "cache_control": cache}],
        messages=[
            {"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": cache}]},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}, "cache_control": cache}],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t",
                        "cache_control": cache,
                        "content": [{"type": "text", "text": "ok", "cache_control": cache}],
                    },
                    {"type": "image", "source": {"type": "url", "url": "https://x/a.png"}, "cache_control": cache},
                ],
            },
        ],
    )
    plain = json.loads(json.dumps(marked).replace(', "cache_control": {"type": "ephemeral", "ttl": "1h"}', ""))
    assert "cache_control" not in json.dumps(plain)
    parsed = anthropic_messages.parse(marked)
    assert parsed.request == anthropic_messages.parse(plain).request and parsed.options is None


def test_count_tokens_needs_no_max_tokens_and_never_streams() -> None:
    parsed = anthropic_messages.parse_count({"model": "m", "messages": USER})
    assert parsed.request.sampling.max_tokens is None and not parsed.stream
    with pytest.raises(InvalidRequest) as streamed:
        anthropic_messages.parse_count({"model": "m", "messages": USER, "stream": True})  # counting never streams
    assert streamed.value.param == "stream"
    with pytest.raises(InvalidRequest) as caught:
        anthropic_messages.parse_count({"model": "m", "messages": [{"role": "user", "content": [{"type": "text"}]}]})
    assert caught.value.param == "messages[0].content[0].text"


@pytest.mark.parametrize(
    "cache_control", [{"type": "ephemeral"}, {"type": "ephemeral", "ttl": "5m"}, {"ttl": "1h", "type": "ephemeral"}]
)
def test_top_level_cache_control_asks_for_automatic_caching(cache_control: dict[str, Any]) -> None:
    assert anthropic_messages.parse(body(cache_control=cache_control)).options == anthropic_stream.AutoCache()
    assert anthropic_messages.parse(body(cache_control=None)).options is None
    assert anthropic_messages.parse(body()).options is None
    anthropic_messages.parse_count({"model": "m", "messages": USER, "cache_control": cache_control})  # counted alike
    with pytest.raises(InvalidRequest) as caught:
        anthropic_messages.parse_count({"model": "m", "messages": USER, "cache_control": {"type": "lasting"}})
    assert caught.value.param == "cache_control.type"


@pytest.mark.parametrize(("cache", "expected"), [(None, (8, 0, 4)), (anthropic_stream.AutoCache(), (0, 8, 4))])
def test_cache_writes_are_counted_only_where_caching_was_asked(
    cache: anthropic_stream.AutoCache | None, expected: tuple[int, int, int]
) -> None:
    """Input, cache writes and cache reads sum to the prompt's tokens either way."""
    meta = Meta(request_id="test", created=1700000000, model="m")
    finish = Finish("stop", Usage(prompt_tokens=12, completion_tokens=3, cached_tokens=4))
    usage = anthropic_stream.fold_message(meta, [finish], cache)["usage"]
    assert (usage["input_tokens"], usage["cache_creation_input_tokens"], usage["cache_read_input_tokens"]) == expected


def test_a_turn_of_tool_results_only_has_no_user_message() -> None:
    turn = {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "t", "content": [{"type": "text", "text": "ok"}]}],
    }
    messages = anthropic_messages.parse(body(messages=[*USER, turn])).request.messages
    assert [(m.role, m.content, m.tool_call_id) for m in messages] == [("user", "hi", None), ("tool", "ok", "t")]


def test_unknown_fields_are_refused_and_inert_ones_pass() -> None:
    parsed = anthropic_messages.parse(body(service_tier="auto", container=None, metadata={"user_id": "u", "x": None}))
    assert parsed.request.user == "u"  # one tier serves every request; a null field is not set
    with pytest.raises(InvalidRequest) as caught:
        anthropic_messages.parse(body(container="c-1"))
    assert caught.value.param == "container" and "Unrecognized parameter" in caught.value.message


# -- errors ----------------------------------------------------------------------------------------------

ERRORS: list[tuple[LLMError, str]] = [
    (InvalidRequest("Bad temperature.", param="temperature"), "invalid_request_error"),
    (Unsupported("No images.", param="messages[0].content[0].type"), "invalid_request_error"),
    (ContextOverflow("Too long.", param="messages"), "invalid_request_error"),
    (Unauthorized("No key."), "authentication_error"),
    (Forbidden("Not yours."), "permission_error"),
    (ModelNotFound("claude-9"), "not_found_error"),
    (MethodNotAllowed("Use POST here."), "invalid_request_error"),
    (RateLimited("Slow down.", retry_after=3), "rate_limit_error"),
    (InternalError("Something broke."), "api_error"),
    (Overloaded("Busy."), "overloaded_error"),
    (ModelNotReady("Loading."), "overloaded_error"),
]


@pytest.mark.parametrize(("error", "kind"), ERRORS, ids=lambda e: type(e).__name__ if isinstance(e, LLMError) else e)
def test_error_envelope(error: LLMError, kind: str) -> None:
    status, body_ = anthropic_common.render_error(error)
    assert status == error.status
    assert body_["error"]["type"] == kind
    assert error.message in body_["error"]["message"]
    if error.param:
        assert error.param in body_["error"]["message"]
    ErrorResponse.model_validate(body_)


def test_payload_too_large_is_request_too_large() -> None:
    status, body_ = anthropic_common.render_error(PayloadTooLarge("Too big."))
    assert (status, body_) == (413, {"type": "error", "error": {"type": "request_too_large", "message": "Too big."}})


def test_param_is_not_repeated_when_the_message_quotes_it() -> None:
    _, body_ = anthropic_common.render_error(
        InvalidRequest("Missing required parameter: 'max_tokens'.", param="max_tokens")
    )
    assert body_["error"]["message"] == "Missing required parameter: 'max_tokens'."


def test_adapter_wiring() -> None:
    assert ANTHROPIC.signature_header == "anthropic-version"
    assert ANTHROPIC.render_error is anthropic_common.render_error
    assert {r.path for r in ANTHROPIC.routes} == {
        "/messages",
        "/messages/count_tokens",
        "/models",
        "/models/{model:path}",
    }


def _stream() -> anthropic_stream.MessageStream:
    parsed = anthropic_messages.parse(body(stream=True))
    return anthropic_stream.MessageStream(parsed, Meta(request_id="test", created=1700000000, model="m"))


def test_stream_error_event_is_an_error_envelope() -> None:
    raw = _stream().error(Overloaded("Busy."))
    name, data = raw.removesuffix(b"\n\n").decode().split("\n")
    assert name == "event: error"
    ErrorResponse.model_validate(json.loads(data.removeprefix("data: ")))


def test_bad_tool_arguments_are_a_server_error_not_a_crash() -> None:
    parsed = anthropic_messages.parse(body())
    events: list[GenerationEvent] = [
        ToolCallStart("t", "f"),
        ToolCallDelta("[1, 2]"),
        ToolCallEnd(),
        Finish("tool_calls", Usage(1, 1)),
    ]
    with pytest.raises(InternalError):
        anthropic_messages.render(parsed, Meta(request_id="test", created=1, model="m"), events)


def test_stream_close_without_finish_still_closes_the_block() -> None:
    stream = _stream()
    raw = stream.open() + stream.event(ToolCallStart("t", "f")) + stream.close()
    types = [
        json.loads(line.removeprefix(b"data: "))["type"] for line in raw.split(b"\n") if line.startswith(b"data: ")
    ]
    assert types[-2:] == ["content_block_stop", "message_stop"]
    adapter: TypeAdapter[RawMessageStreamEvent] = TypeAdapter(RawMessageStreamEvent)
    for line in raw.split(b"\n"):
        if line.startswith(b"data: ") and b'"ping"' not in line:
            adapter.validate_json(line.removeprefix(b"data: "))
