"""The upstream engine's pure translation: request bodies, streamed chunks, model lists, errors."""

from __future__ import annotations

import json
from typing import Any

import pytest

from asgi_llm.core import (
    BadGateway,
    ChatRequest,
    CompletionRequest,
    ContextOverflow,
    EmbeddingRequest,
    Finish,
    GatewayTimeout,
    InvalidRequest,
    Message,
    OutputFormat,
    PayloadTooLarge,
    RateLimited,
    ReasoningDelta,
    SamplingParams,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    ToolSpec,
    Unavailable,
    Unsupported,
    Usage,
)
from asgi_llm.engines.upstream.errors import error_from_body, error_from_response, retry_after, retryable
from asgi_llm.engines.upstream.stream import ChunkTranslator, SSEDecoder
from asgi_llm.engines.upstream.wire import (
    UpstreamModel,
    chat_body,
    chat_from_completion,
    completion_body,
    count_body,
    embedding_body,
    model_list,
)

NOW = 1_700_000_000.0


def test_chat_body_carries_turns_tools_and_constraints() -> None:
    request = ChatRequest(
        model="local-name",
        messages=(
            Message("system", "Be brief."),
            Message("user", "Weather in Paris?"),
            Message("assistant", "", tool_calls=(ToolCall("call_1", "weather", '{"city":"Paris"}'),)),
            Message("tool", "18C", tool_call_id="call_1"),
        ),
        sampling=SamplingParams(
            max_tokens=7,
            temperature=0.0,
            stop=("\n",),
            seed=3,
            top_k=20,
            logit_bias=((42, -100.0),),
            output_format=OutputFormat("json_schema", "response_format", {"type": "object"}, name="w", strict=True),
        ),
        tools=(ToolSpec("weather", "Look it up", {"type": "object", "properties": {"city": {"type": "string"}}}),),
        tool_choice="weather",
        parallel_tool_calls=False,
    )
    body = chat_body(request, "upstream-name")
    assert body["model"] == "upstream-name"
    assert body["messages"][2] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": '{"city":"Paris"}'}}
        ],
    }
    assert body["messages"][3] == {"role": "tool", "content": "18C", "tool_call_id": "call_1"}
    assert body["tools"][0]["function"]["name"] == "weather"
    assert body["tool_choice"] == {"type": "function", "function": {"name": "weather"}}
    assert body["parallel_tool_calls"] is False
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "w", "schema": {"type": "object"}, "strict": True},
    }
    assert (body["max_tokens"], body["temperature"], body["seed"], body["top_k"]) == (7, 0.0, 3, 20)
    assert "stop" not in body  # matched here, as the text arrives: the upstream would not say which stop it met
    assert body["logit_bias"] == {"42": -100.0}
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}


def test_default_sampling_sends_no_vendor_fields() -> None:
    body = chat_body(ChatRequest(model="m", messages=(Message("user", "hi"),)), "m")
    assert not {"top_k", "min_p", "repeat_penalty", "presence_penalty", "logit_bias", "tools", "n", "max_tokens"} & set(
        body
    )


def test_a_grammar_is_refused_not_dropped() -> None:
    """llama.cpp's GBNF is no OpenAI field: an upstream (vLLM, OpenAI) would decode without it."""
    grammar = OutputFormat(kind="grammar", param="grammar", grammar='root ::= "a"')
    request = CompletionRequest(model="m", prompts=("a",), sampling=SamplingParams(output_format=grammar))
    with pytest.raises(Unsupported) as refused:
        completion_body(request, "up")
    assert refused.value.param == "grammar"


def test_completion_embedding_and_count_bodies() -> None:
    request = CompletionRequest(model="m", prompts=("a", (1, 2)), n=2, echo=True, sampling=SamplingParams(max_tokens=3))
    body = completion_body(request, "up")
    assert body["prompt"] == ["a", [1, 2]] and body["n"] == 2 and body["echo"] is True
    assert embedding_body(EmbeddingRequest(model="m", inputs=("x", (5,))), "up")["input"] == ["x", [5]]
    count = count_body(ChatRequest(model="m", messages=(Message("user", "hi"),), n=3), "up")
    assert count["max_tokens"] == 1 and "stream" not in count and "n" not in count


def test_a_plain_completion_can_stand_in_as_chat() -> None:
    chat = chat_from_completion(CompletionRequest(model="m", prompts=("Once",), sampling=SamplingParams(max_tokens=2)))
    assert chat is not None and chat.messages == (Message("user", "Once"),) and chat.sampling.max_tokens == 2
    assert chat_from_completion(CompletionRequest(model="m", prompts=((1, 2),))) is None
    assert chat_from_completion(CompletionRequest(model="m", prompts=("a",), echo=True)) is None


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            {"object": "list", "data": [{"id": "a", "max_model_len": 8192}, {"id": "b"}]},
            [UpstreamModel("a", 8192), UpstreamModel("b")],
        ),
        ([{"id": "a"}, "b", {"nothing": 1}], [UpstreamModel("a"), UpstreamModel("b")]),
        ({"models": [{"name": "llama3:8b", "meta": {"n_ctx_train": 4096}}]}, [UpstreamModel("llama3:8b", 4096)]),
        ({"unexpected": True}, []),
    ],
)
def test_model_lists(body: Any, expected: list[UpstreamModel]) -> None:
    assert model_list(body) == expected


def feed(translator: ChunkTranslator, chunks: list[dict[str, Any]]) -> list[Any]:
    events: list[Any] = []
    for chunk in chunks:
        events += translator.feed(chunk)
    return events + translator.finish()


def delta(content: Any = None, index: int = 0, reason: str | None = None, **fields: Any) -> dict[str, Any]:
    d = {"content": content, **fields} if content is not None else dict(fields)
    return {"choices": [{"index": index, "delta": d, "finish_reason": reason}]}


def test_text_and_usage_with_cached_tokens() -> None:
    usage = {
        "prompt_tokens": 31,
        "completion_tokens": 2,
        "prompt_tokens_details": {"cached_tokens": 30},
        "completion_tokens_details": {"reasoning_tokens": 1},
    }
    chunks = [
        delta(role="assistant"),
        delta("Hel"),
        delta("lo"),
        delta(reason="length"),
        {"choices": [], "usage": usage},
    ]
    events = feed(ChunkTranslator(1, request_id="r", prompt_estimate=99), chunks)
    assert events == [TextDelta("Hel"), TextDelta("lo"), Finish("length", Usage(31, 2, 30, reasoning_tokens=1))]


def test_missing_usage_is_estimated_from_chunks() -> None:
    events = feed(
        ChunkTranslator(1, request_id="r", prompt_estimate=9), [delta("a"), delta("b"), delta("c", reason="stop")]
    )
    assert events[-1] == Finish("stop", Usage(9, 3))


def test_reasoning_fields_and_think_text() -> None:
    chunks = [delta(reasoning_content="Hmm."), delta(reasoning=" More."), delta("Yes", reason="stop")]
    assert feed(ChunkTranslator(1, request_id="r", prompt_estimate=1), chunks)[:3] == [
        ReasoningDelta("Hmm."),
        ReasoningDelta(" More."),
        TextDelta("Yes"),
    ]
    think = [delta("<thi"), delta("nk>Let me"), delta(" see</think>\n\n"), delta("Four.", reason="stop")]
    events = feed(ChunkTranslator(1, request_id="r", prompt_estimate=1), think)
    assert "".join(e.text for e in events if isinstance(e, ReasoningDelta)) == "Let me see"
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Four."


def test_tool_call_deltas_start_once_named_and_end_on_finish() -> None:
    first = {"index": 0, "id": "call_a", "type": "function", "function": {"name": "weather", "arguments": ""}}
    second = {"index": 1, "id": "call_b", "function": {"name": "time", "arguments": "{}"}}
    chunks = [
        delta(tool_calls=[first]),
        delta(tool_calls=[{"index": 0, "function": {"arguments": '{"city":'}}]),
        delta(tool_calls=[{"index": 0, "function": {"arguments": '"Oslo"}'}}, second]),
        delta(reason="tool_calls"),
    ]
    events = feed(ChunkTranslator(1, request_id="r", prompt_estimate=1), chunks)
    assert events == [
        ToolCallStart("call_a", "weather"),
        ToolCallDelta('{"city":'),
        ToolCallDelta('"Oslo"}'),
        ToolCallStart("call_b", "time", call_index=1),
        ToolCallDelta("{}", call_index=1),
        ToolCallEnd(),
        ToolCallEnd(call_index=1),
        Finish("tool_calls", Usage(1, 3)),
    ]


def test_a_call_without_a_name_yet_waits_and_gets_an_id() -> None:
    chunks = [
        delta(tool_calls=[{"index": 0, "function": {"arguments": "{"}}]),
        delta(tool_calls=[{"index": 0, "function": {"name": "f", "arguments": "}"}}], reason="stop"),
    ]
    events = feed(ChunkTranslator(1, request_id="r9", prompt_estimate=1), chunks)
    assert events[:2] == [ToolCallStart("call_r9_0_0", "f"), ToolCallDelta("{}")]
    assert isinstance(events[-1], Finish) and events[-1].reason == "tool_calls"


def test_several_choices_and_completion_chunks() -> None:
    chunks = [
        {"choices": [{"index": 1, "text": "B", "finish_reason": None}]},
        {"choices": [{"index": 0, "text": "A", "finish_reason": "stop"}]},
        {
            "choices": [{"index": 1, "text": "", "finish_reason": "length"}],
            "usage": {"prompt_tokens": 4, "completion_tokens": 2},
        },
    ]
    events = feed(ChunkTranslator(2, request_id="r", prompt_estimate=1), chunks)
    assert events == [
        TextDelta("B", index=1),
        TextDelta("A"),
        Finish("stop", Usage(4, 2)),
        Finish("length", Usage(0, 0), index=1),
    ]


def test_logprobs_ride_on_the_text() -> None:
    logprobs = {
        "content": [
            {"token": "Hi", "logprob": -0.5, "bytes": [72, 105], "top_logprobs": [{"token": "Hi", "logprob": -0.5}]}
        ]
    }
    events = feed(
        ChunkTranslator(1, request_id="r", prompt_estimate=1),
        [{"choices": [{"index": 0, "delta": {"content": "Hi"}, "logprobs": logprobs}]}],
    )
    first = events[0]
    assert isinstance(first, TextDelta) and first.logprobs[0].bytes == b"Hi" and first.logprobs[0].top[0].token == "Hi"


def test_sse_decoder() -> None:
    decoder = SSEDecoder()
    out = [decoder.line(line) for line in [": ping", "event: x", 'data: {"a":', "data: 1}", "", "data:[DONE]", ""]]
    assert [o for o in out if o is not None] == ['{"a":\n1}', "[DONE]"]
    decoder.line("data: tail")
    assert decoder.flush() == "tail" and decoder.flush() is None


def err(status: int, body: Any = None, headers: dict[str, str] | None = None) -> Any:
    raw = json.dumps(body).encode() if body is not None else b""
    return error_from_response(
        status, headers or {}, raw, secrets=["sk-upstream-secret", "http://u:p@host/v1"], now=NOW
    )


def test_client_errors_keep_the_upstream_message_without_secrets() -> None:
    error = err(
        400, {"error": {"message": "bad max_tokens (key sk-upstream-secret)", "param": "max_tokens", "code": None}}
    )
    assert isinstance(error, InvalidRequest) and error.status == 400 and error.param == "max_tokens"
    assert "sk-upstream-secret" not in error.message and "[redacted]" in error.message
    assert isinstance(err(400, {"error": {"message": "too long", "code": "context_length_exceeded"}}), ContextOverflow)
    assert isinstance(err(422, {"detail": [{"msg": "field required"}]}), InvalidRequest)
    assert isinstance(err(413), PayloadTooLarge)


def test_rate_limits_keep_retry_after_in_seconds_or_as_a_date() -> None:
    error = err(429, {"error": "slow down"}, {"retry-after": "7"})
    assert isinstance(error, RateLimited) and error.retry_after == 7 and error.status == 429
    assert retry_after("Tue, 14 Nov 2023 22:13:40 GMT", NOW) == 20
    assert retry_after("soon", NOW) == 1 and retry_after(None, NOW) == 1


@pytest.mark.parametrize(
    ("status", "kind", "code"),
    [
        (401, BadGateway, 502),
        (403, BadGateway, 502),
        (404, BadGateway, 502),
        (500, BadGateway, 502),
        (502, BadGateway, 502),
        (503, Unavailable, 503),
        (504, GatewayTimeout, 504),
    ],
)
def test_server_side_failures_are_gateway_errors(status: int, kind: type[Exception], code: int) -> None:
    error = err(status, {"error": {"message": "upstream key sk-upstream-secret was wrong"}})
    assert isinstance(error, kind) and error.status == code
    assert "sk-upstream-secret" not in error.message


def test_retryable_statuses_and_stream_errors() -> None:
    assert retryable(503) and retryable(429) and not retryable(400) and not retryable(401)
    error = error_from_body({"error": {"message": "boom at http://u:p@host/v1"}}, secrets=["http://u:p@host/v1"])
    assert isinstance(error, BadGateway) and "u:p@host" not in error.message
