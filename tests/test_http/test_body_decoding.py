"""Request bodies that parse as JSON yet would fail deep inside are refused at the door."""

from __future__ import annotations

import json

import pytest

from asgi_llm.core import InvalidRequest
from asgi_llm.http.body import MAX_NESTING, decode_json


def nested(levels: int) -> bytes:
    """An object whose innermost value sits `levels` JSON levels deep (the object is level 1)."""
    return ('{"a":' + "[" * (levels - 1) + "]" * (levels - 1) + "}").encode()


def test_nesting_up_to_the_limit_is_taken_and_one_more_level_is_refused() -> None:
    assert decode_json(nested(MAX_NESTING))["a"]
    with pytest.raises(InvalidRequest, match=f"deeper than {MAX_NESTING} levels"):
        decode_json(nested(MAX_NESTING + 1))


def test_nesting_past_what_the_json_decoder_can_recurse_is_refused_too() -> None:
    with pytest.raises(InvalidRequest, match="deeper than"):
        decode_json(b"[" * 100_000 + b"]" * 100_000)
    with pytest.raises(InvalidRequest, match="deeper than"):
        decode_json(b'{"a":' + b'{"a":' * 100_000 + b"1" + b"}" * 100_001)


@pytest.mark.parametrize(
    "body",
    [b'{"a": "x\\ud800"}', b'{"a": ["\\uDFFF"]}', b'{"\\udc00": 1}', b'{"a": {"b": "\\ude00\\ud83d"}}'],
    ids=["high", "low-upper-case", "in-a-key", "pair-backwards"],
)
def test_a_lone_surrogate_anywhere_is_refused(body: bytes) -> None:
    with pytest.raises(InvalidRequest, match="lone UTF-16 surrogate"):
        decode_json(body)


def test_escaped_pairs_and_raw_text_are_text() -> None:
    assert decode_json(b'{"a": "\\ud83d\\ude00", "b": "\\u00e9"}') == {"a": "\U0001f600", "b": "\u00e9"}
    assert decode_json(json.dumps({"a": "\U0001f600"}, ensure_ascii=False).encode()) == {"a": "\U0001f600"}


@pytest.mark.parametrize(
    ("body", "key"),
    [
        (b'{"model": "a", "max_tokens": 2, "model": "b"}', "model"),
        (b'{"messages": [{"role": "user", "content": "hi", "role": "system"}]}', "role"),
        (b'{"tools": [{"function": {"parameters": {"type": "object", "type": "string"}}}]}', "type"),
    ],
    ids=["top-level", "in-a-message", "in-a-schema"],
)
def test_a_key_twice_in_one_object_is_refused(body: bytes, key: str) -> None:
    with pytest.raises(InvalidRequest, match=f"key '{key}' twice"):
        decode_json(body)


def test_the_same_key_in_different_objects_is_fine() -> None:
    body = b'{"model": "a", "messages": [{"role": "user"}, {"role": "assistant"}], "meta": {"model": "b"}}'
    assert decode_json(body)["messages"][1] == {"role": "assistant"}


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b'{"temperature": NaN}', "NaN, which is not a JSON number"),
        (b'{"options": {"temperature": Infinity}}', "Infinity, which is not a JSON number"),
        (b'{"a": [-Infinity]}', "-Infinity, which is not a JSON number"),
        (b'{"temperature": 1e400}', "1e400 in the request body is too large"),
        (b'{"top_k": ' + b"9" * 5000 + b"}", "too many digits"),
    ],
)
def test_numbers_that_are_not_finite_json_numbers_are_refused(body: bytes, says: str) -> None:
    """Python's decoder takes NaN and Infinity, and turns 1e400 into inf: none of them would
    compare sanely in a sampler or a limit, so they are a 400, not a value."""
    with pytest.raises(InvalidRequest, match=says):
        decode_json(body)
    assert decode_json(b'{"temperature": 1e308, "top_k": 100000000000000000000}')["temperature"] == 1e308
