"""Every bad input, one by one, answered in OpenAI's envelope with the right status — over real HTTP."""

from __future__ import annotations

import json

import httpx
import pytest

MODEL = "SmolLM2-135M-Instruct"
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


def _error(response: httpx.Response, status: int) -> dict[str, object]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error"}
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code", "request_id"}
    assert error["request_id"] == response.headers["x-request-id"]
    text = response.text
    assert "Traceback" not in text and "/work" not in text and ".gguf" not in text and "site-packages" not in text
    return error


@pytest.fixture
def post(server):
    def send(path: str, **kwargs: object) -> httpx.Response:
        return httpx.post(f"{server.url}/v1{path}", timeout=30, **kwargs)  # type: ignore[arg-type]

    return send


def test_malformed_json(post) -> None:
    error = _error(post("/chat/completions", content=b'{"model": ', headers={"content-type": "application/json"}), 400)
    assert error["type"] == "invalid_request_error"


def test_body_that_is_not_an_object(post) -> None:
    _error(post("/chat/completions", json=["not", "an", "object"]), 400)


@pytest.mark.parametrize(
    ("change", "param"),
    [
        ({"temperature": "hot"}, "temperature"),
        ({"max_tokens": "10"}, "max_tokens"),
        ({"messages": "hi"}, "messages"),
        ({"messages": [{"role": "wizard", "content": "hi"}]}, "messages[0].role"),
        ({"stop": 5}, "stop"),
        ({"n": 0}, "n"),
        ({"top_logprobs": 2}, "top_logprobs"),
        ({"tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "sometimes"}, "tool_choice"),
        ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}, "messages[0].content[0]"),
        ({"messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}]}, "messages[0].content[0].type"),
    ],
)
def test_wrong_field_names_the_param(post, change: dict[str, object], param: str) -> None:
    error = _error(post("/chat/completions", json={**CHAT, **change}), 400)
    assert error["param"] == param


def test_missing_required_field(post) -> None:
    error = _error(post("/chat/completions", json={"model": MODEL}), 400)
    assert error["param"] == "messages"


def test_unknown_model(post) -> None:
    error = _error(post("/completions", json={"model": "nope", "prompt": "x"}), 404)
    assert error["code"] == "model_not_found"


def test_token_outside_vocabulary(post) -> None:
    error = _error(post("/completions", json={"model": MODEL, "prompt": [1, 99999999]}), 400)
    assert error["param"] == "prompt[0][1]"


def test_context_overflow_on_completions(post) -> None:
    error = _error(post("/completions", json={"model": MODEL, "prompt": "word " * 3000, "stream": True}), 400)
    assert error["code"] == "context_length_exceeded"


def test_max_tokens_beyond_context(post) -> None:
    error = _error(post("/chat/completions", json={**CHAT, "max_tokens": 100_000}), 400)
    assert error["code"] == "context_length_exceeded"


def test_oversized_body_is_413(post) -> None:
    huge = {**CHAT, "messages": [{"role": "user", "content": "x" * 300_000}]}
    _error(post("/chat/completions", json=huge), 413)


def test_unknown_route_and_wrong_method(server) -> None:
    error = _error(httpx.get(f"{server.url}/v1/nothing-here", timeout=60), 404)
    assert error["code"] == "not_found"
    error = _error(httpx.get(f"{server.url}/v1/chat/completions", timeout=60), 405)
    assert error["code"] == "method_not_allowed"


def test_trailing_slash_is_served_without_redirect(server) -> None:
    response = httpx.get(f"{server.url}/v1/models/", follow_redirects=False, timeout=60)
    assert response.status_code == 200
    assert response.json()["object"] == "list"


def test_empty_prompt_is_400(post) -> None:
    error = _error(post("/completions", json={"model": MODEL, "prompt": "", "max_tokens": 2}), 400)
    assert error["param"] == "prompt"


def _deep_schema(levels: int) -> dict[str, object]:
    schema: dict[str, object] = {"type": "object"}
    inner = schema
    for _ in range(levels):
        child: dict[str, object] = {"type": "object"}
        inner["properties"] = {"a": child}
        inner = child
    return schema


_LONE_SURROGATE = b'"say \\ud800 twice"'
_MESSAGES = b'"messages": [{"role": "user", "content": CONTENT}]'
_PROTOCOLS = {  # path, and a request with `CONTENT` where its text goes
    "openai": ("/v1/chat/completions", b'{"model": "default", "max_tokens": 2, ' + _MESSAGES + b"}"),
    "responses": ("/v1/responses", b'{"model": "default", "max_output_tokens": 16, "input": CONTENT}'),
    "anthropic": ("/v1/messages", b'{"model": "default", "max_tokens": 2, ' + _MESSAGES + b"}"),
    "ollama": ("/api/chat", b'{"model": "default", "stream": false, ' + _MESSAGES + b"}"),
}


def _protocol_error(protocol: str, response: httpx.Response) -> str:
    """The message of a 400 in the protocol's own envelope, with nothing of the server in it."""
    if protocol in ("openai", "responses"):
        return str(_error(response, 400)["message"])
    assert response.status_code == 400, response.text
    body = response.json()
    assert "Traceback" not in response.text and "site-packages" not in response.text
    if protocol == "anthropic":
        assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
        return str(body["error"]["message"])
    assert set(body) == {"error", "request_id"} and body["request_id"] == response.headers["x-request-id"]
    return str(body["error"])


@pytest.mark.parametrize("protocol", sorted(_PROTOCOLS))
def test_what_parses_but_no_text_or_stack_can_hold_is_400_in_each_protocol(server, protocol: str) -> None:
    path, template = _PROTOCOLS[protocol]
    tools = {"tools": [{"type": "function", "function": {"name": "f", "parameters": _deep_schema(70)}}]}
    with_tools = template.replace(b"CONTENT", b'"hi"')[:-1] + b", " + json.dumps(tools)[1:].encode()
    bodies = [
        ("lone UTF-16 surrogate", template.replace(b"CONTENT", _LONE_SURROGATE)),
        ("nests deeper than 128", with_tools),  # a schema that would exhaust jsonschema's recursion
        ("nests deeper than 128", b'{"model": ' + b"[" * 50_000 + b"]" * 50_000 + b"}"),  # and json's
        ("key 'model' twice", template.replace(b"CONTENT", b'"hi"')[:-1] + b', "model": "chat-only"}'),
    ]
    json_headers = {"content-type": "application/json"}
    for expected, body in bodies:
        reply = httpx.post(server.url + path, content=body, headers=json_headers, timeout=30)
        assert expected in _protocol_error(protocol, reply)
    pair = template.replace(b"CONTENT", b'"say \\ud83d\\ude00 twice"')  # a surrogate pair is one character
    assert httpx.post(server.url + path, content=pair, headers=json_headers, timeout=60).status_code == 200


def test_a_logit_bias_outside_the_vocabulary_is_a_400_naming_it(post) -> None:
    error = _error(post("/chat/completions", json={**CHAT, "logit_bias": {"9999999": 5}}), 400)
    assert error["param"] == "logit_bias" and "9999999" in str(error["message"])


@pytest.mark.parametrize("number", [b"NaN", b"Infinity", b"1e999"])
def test_a_number_json_cannot_hold_is_a_400(post, number: bytes) -> None:
    body = b'{"model": "' + MODEL.encode() + b'", "messages": [{"role": "user", "content": "hi"}], "temperature": ' + number + b"}"
    error = _error(post("/chat/completions", content=body, headers={"content-type": "application/json"}), 400)
    assert error["type"] == "invalid_request_error" and number.decode() in str(error["message"])
