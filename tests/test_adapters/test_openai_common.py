"""The small shared pieces of the OpenAI adapters."""

from __future__ import annotations

from asgi_llm.adapters.openai.common import SSE_DONE, render_error, sse, stop_list, usage_dict
from asgi_llm.core import InvalidRequest, RateLimited, Usage


def test_sse_is_one_compact_utf8_data_event() -> None:
    assert sse({"a": "é", "b": [1, None]}) == 'data: {"a":"é","b":[1,null]}\n\n'.encode()
    assert sse({"text": "line\nbreak"}) == b'data: {"text":"line\\nbreak"}\n\n'  # newlines stay escaped
    assert SSE_DONE == b"data: [DONE]\n\n"


def test_stop_list() -> None:
    assert stop_list(None) == ()
    assert stop_list("\n") == ("\n",)
    assert stop_list(["a", "b"]) == ("a", "b")


def test_usage_dict_totals_and_details() -> None:
    assert usage_dict(Usage(10, 5, cached_tokens=3, reasoning_tokens=4)) == {
        "prompt_tokens": 10,
        "completion_tokens": 5,
        "total_tokens": 15,
        "prompt_tokens_details": {"cached_tokens": 3},
        "completion_tokens_details": {"reasoning_tokens": 4},
    }


def test_render_error_types() -> None:
    assert render_error(InvalidRequest("Bad.", param="n")) == (
        400,
        {"error": {"message": "Bad.", "type": "invalid_request_error", "param": "n", "code": "invalid_request"}},
    )
    status, body = render_error(RateLimited("Slow down."))
    assert (status, body["error"]["type"], body["error"]["param"]) == (429, "rate_limit_error", None)


def test_responses_usage_reports_reasoning_tokens() -> None:
    from asgi_llm.adapters.openai.responses.output import usage_dict as responses_usage

    usage = responses_usage(Usage(10, 5, cached_tokens=3, reasoning_tokens=4))
    assert usage["output_tokens_details"] == {"reasoning_tokens": 4}
    assert usage["input_tokens_details"]["cached_tokens"] == 3 and usage["total_tokens"] == 15
