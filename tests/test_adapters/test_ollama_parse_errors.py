"""Ollama bodies: bad ones fail in `parse` naming the `param`; what Ollama accepts, we accept."""

from __future__ import annotations

from typing import Any

import pytest

from asgi_llm.adapters.ollama import (
    chat as ollama_chat,
)
from asgi_llm.adapters.ollama import (
    embed as ollama_embed,
)
from asgi_llm.adapters.ollama import (
    generate as ollama_generate,
)
from asgi_llm.adapters.ollama import (
    models as ollama_models,
)
from asgi_llm.adapters.ollama.common import keep_alive_seconds
from asgi_llm.core import ChatRequest, CompletionRequest, InvalidRequest, Unsupported

USER = [{"role": "user", "content": "hi"}]


def chat(**fields: Any) -> dict[str, Any]:
    return {"model": "m", "messages": USER, **fields}


def generate(**fields: Any) -> dict[str, Any]:
    return {"model": "m", "prompt": "Once", **fields}


def embed(**fields: Any) -> dict[str, Any]:
    return {"model": "m", "input": "hello", **fields}


def _show(body: Any) -> Any:
    return ollama_models.show([], body)


def _pull(body: Any) -> Any:
    return ollama_models.pull([], body)


def message(role: str, **fields: Any) -> dict[str, Any]:
    return chat(messages=[{"role": role, "content": "x", **fields}])


_CALLS = [{"function": {"name": "f", "arguments": {}}}]


def embeddings(**fields: Any) -> dict[str, Any]:
    return {"model": "m", "prompt": "hello", **fields}


CHAT, GENERATE, EMBED = ollama_chat.parse, ollama_generate.parse, ollama_embed.parse_embed
EMBEDDINGS = ollama_embed.parse_embeddings

INVALID = [
    pytest.param(CHAT, {"messages": USER}, "model", id="chat-missing-model"),
    pytest.param(CHAT, chat(model=""), "model", id="chat-empty-model"),
    pytest.param(CHAT, chat(messages="hi"), "messages", id="chat-messages-not-list"),
    pytest.param(CHAT, chat(messages=[{"role": "bot", "content": "x"}]), "messages[0].role", id="chat-role"),
    pytest.param(CHAT, chat(messages=[{"role": "user", "content": 5}]), "messages[0].content", id="chat-content-int"),
    pytest.param(
        CHAT,
        chat(messages=[{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": '{"a": 1}'}}]}]),
        "messages[0].tool_calls[0].function.arguments",
        id="chat-tool-arguments-as-text",
    ),
    pytest.param(
        CHAT, chat(tools=[{"type": "retrieval", "function": {"name": "f"}}]), "tools[0].type", id="chat-tool-type"
    ),
    pytest.param(
        CHAT, chat(tools=[{"type": "function", "function": {}}]), "tools[0].function.name", id="chat-tool-no-name"
    ),
    pytest.param(CHAT, chat(stream="yes"), "stream", id="chat-stream-str"),
    pytest.param(CHAT, chat(options="fast"), "options", id="chat-options-str"),
    pytest.param(CHAT, chat(options={"temperature": "hot"}), "options.temperature", id="chat-temperature-str"),
    pytest.param(CHAT, chat(options={"temperature": -1}), "options.temperature", id="chat-temperature-negative"),
    pytest.param(CHAT, chat(options={"num_predict": "10"}), "options.num_predict", id="chat-num-predict-str"),
    pytest.param(CHAT, chat(options={"num_ctx": 1.5}), "options.num_ctx", id="chat-num-ctx-float"),
    pytest.param(CHAT, chat(options={"top_p": 2}), "options.top_p", id="chat-top-p-range"),
    pytest.param(CHAT, chat(options={"stop": [1]}), "options.stop", id="chat-stop-int"),
    pytest.param(CHAT, chat(keep_alive="forever"), "keep_alive", id="chat-keep-alive-word"),
    pytest.param(CHAT, chat(keep_alive="5 m"), "keep_alive", id="chat-keep-alive-space"),
    pytest.param(CHAT, chat(keep_alive=[5]), "keep_alive", id="chat-keep-alive-list"),
    pytest.param(CHAT, chat(top_logprobs=2), "top_logprobs", id="chat-top-logprobs-without-logprobs"),
    pytest.param(CHAT, chat(logprobs=True, top_logprobs=21), "top_logprobs", id="chat-top-logprobs-range"),
    pytest.param(GENERATE, {"prompt": "x"}, "model", id="generate-missing-model"),
    pytest.param(GENERATE, generate(prompt=5), "prompt", id="generate-prompt-int"),
    pytest.param(GENERATE, generate(raw="yes"), "raw", id="generate-raw-str"),
    pytest.param(GENERATE, generate(system=["a"]), "system", id="generate-system-list"),
    pytest.param(GENERATE, generate(options={"seed": "1"}), "options.seed", id="generate-seed-str"),
    pytest.param(EMBED, {"input": "x"}, "model", id="embed-missing-model"),
    pytest.param(EMBED, embed(input=5), "input", id="embed-input-int"),
    pytest.param(EMBED, embed(input=["a", ""]), "input[1]", id="embed-empty-second"),
    pytest.param(EMBED, embed(truncate="no"), "truncate", id="embed-truncate-str"),
    pytest.param(EMBED, embed(dimensions=-1), "dimensions", id="embed-dimensions-negative"),
    pytest.param(ollama_embed.parse_embeddings, {"model": "m", "prompt": 5}, "prompt", id="embeddings-prompt-int"),
    pytest.param(_show, {"model": 5}, "model", id="show-model-int"),
    pytest.param(_show, {}, "model", id="show-missing-model"),
    pytest.param(_show, {"model": "m", "bogus": 1}, "bogus", id="show-unknown-field"),
    pytest.param(_pull, {"model": "m", "bogus": 1}, "bogus", id="pull-unknown-field"),
    pytest.param(EMBEDDINGS, embeddings(options={"mirostat": 1}), "options.mirostat", id="embeddings-mirostat"),
]

UNSUPPORTED = [
    pytest.param(
        CHAT,
        chat(messages=[{"role": "assistant", "content": "what?", "images": ["iVBORw0KGgo="]}]),
        "messages[0].images",
        id="chat-images-not-user",
    ),
    pytest.param(GENERATE, generate(images=["iVBORw0KGgo="], raw=True), "images", id="generate-images-raw"),
    pytest.param(GENERATE, generate(suffix="return x"), "suffix", id="generate-suffix"),
    pytest.param(GENERATE, generate(template="{{ .Prompt }}"), "template", id="generate-template"),
    pytest.param(GENERATE, generate(context=[1, 2, 3]), "context", id="generate-context"),
    pytest.param(GENERATE, generate(raw=True, system="Be brief."), "system", id="generate-system-raw"),
    pytest.param(CHAT, message("user", thinking="hm"), "messages[0].thinking", id="chat-thinking-user"),
    pytest.param(CHAT, message("tool", thinking="hm"), "messages[0].thinking", id="chat-thinking-tool"),
    pytest.param(CHAT, message("user", tool_calls=_CALLS), "messages[0].tool_calls", id="chat-calls-user"),
    pytest.param(CHAT, message("tool", tool_calls=_CALLS), "messages[0].tool_calls", id="chat-calls-tool"),
    pytest.param(CHAT, message("assistant", tool_name="f"), "messages[0].tool_name", id="chat-tool-name-assistant"),
    pytest.param(CHAT, message("user", tool_call_id="c"), "messages[0].tool_call_id", id="chat-tool-call-id-user"),
    pytest.param(EMBED, embed(options={"temperature": 0.5}), "options.temperature", id="embed-temperature"),
    pytest.param(EMBEDDINGS, embeddings(options={"temperature": 0.5}), "options.temperature", id="embeddings-temp"),
    pytest.param(_show, {"model": "m", "verbose": True}, "verbose", id="show-verbose"),
]


@pytest.mark.parametrize(("parse", "body", "param"), INVALID)
def test_invalid_names_the_param(parse: Any, body: Any, param: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse(body)
    assert caught.value.param == param
    assert caught.value.status == 400


@pytest.mark.parametrize(("parse", "body", "param"), UNSUPPORTED)
def test_unsupported_names_the_param(parse: Any, body: Any, param: str) -> None:
    with pytest.raises(Unsupported) as caught:
        parse(body)
    assert caught.value.param == param
    assert caught.value.status == 400


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(chat(format=""), id="format-empty"),
        pytest.param(chat(format=None), id="format-null"),
        pytest.param(chat(options=None, tools=[], keep_alive=None, think=None), id="nulls-and-empty-tools"),
        pytest.param(chat(options={"mirostat": None}), id="null-options"),
        pytest.param(chat(think=True, keep_alive="10m", unknown_field=None), id="think-and-null-extras"),
        pytest.param(chat(messages=[{"role": "user", "content": "hi", "images": []}]), id="no-images"),
    ],
)
def test_what_ollama_accepts(body: dict[str, Any]) -> None:
    parsed = ollama_chat.parse(body)
    assert parsed.stream is True  # Ollama streams unless told not to
    assert parsed.request.model == "m"


def test_default_tag_is_stripped() -> None:
    assert ollama_chat.parse(chat(model="m:latest")).request.model == "m"
    assert ollama_generate.parse(generate(model="m:latest")).request.model == "m"
    assert ollama_embed.parse_embed(embed(model="m:latest")).request.model == "m"
    assert ollama_chat.parse(chat(model="qwen2.5:0.5b")).request.model == "qwen2.5:0.5b"


def test_unlimited_predictions_and_random_seed() -> None:
    sampling = ollama_chat.parse(chat(options={"num_predict": -1, "seed": -1})).request.sampling
    assert (sampling.max_tokens, sampling.seed) == (None, None)
    sampling = ollama_chat.parse(chat(options={"num_predict": 16, "seed": 3, "stop": "END"})).request.sampling
    assert (sampling.max_tokens, sampling.seed, sampling.stop) == (16, 3, ("END",))


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (None, None),
        (300.0, 300.0),
        ("5m", 300.0),
        ("1h30m", 5400.0),
        ("-1", -1.0),
        (-1.0, -1.0),
        ("0", 0.0),
        ("300ms", 0.3),
        ("2.5s", 2.5),
        ("-1m", -60.0),
        ("45", 45.0),
    ],
)
def test_keep_alive_durations(value: float | str | None, seconds: float | None) -> None:
    result = keep_alive_seconds(value)
    if seconds is None:
        assert result is None
    else:
        assert result == pytest.approx(seconds)


def test_generate_templated_or_raw() -> None:
    templated = ollama_generate.parse(generate(system="Be brief.")).request
    assert isinstance(templated, ChatRequest)
    assert [(m.role, m.content) for m in templated.messages] == [("system", "Be brief."), ("user", "Once")]
    raw = ollama_generate.parse(generate(raw=True, system="")).request  # empty: none, as Ollama reads it
    assert isinstance(raw, CompletionRequest) and raw.prompts == ("Once",)


def test_a_message_field_on_its_own_role_is_read() -> None:
    history = [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": "", "thinking": "I should ask.", "tool_calls": _CALLS},
        {"role": "tool", "content": "sunny", "tool_name": "f", "tool_call_id": "mine"},
    ]
    messages = ollama_chat.parse(chat(messages=history)).request.messages
    assert messages[1].reasoning == "I should ask." and [c.name for c in messages[1].tool_calls] == ["f"]
    assert (messages[2].name, messages[2].tool_call_id) == ("f", "mine")


@pytest.mark.parametrize(("parse", "body"), [(EMBED, embed), (EMBEDDINGS, embeddings)])
def test_embedding_routes_read_num_ctx_alike(parse: Any, body: Any) -> None:
    """The model must have that context: a model loaded with less refuses it (`check_context`)."""
    need = parse(body(options={"num_ctx": 999999})).needs_context
    assert need is not None and (need.tokens, need.param) == (999999, "options.num_ctx")
    assert parse(body()).needs_context is None


@pytest.mark.parametrize(
    ("fmt", "kind", "schema"),
    [({}, "json_schema", {}), ("json", "json_object", {}), ({"type": "object"}, "json_schema", {"type": "object"})],
)
def test_format_constrains_the_output(fmt: Any, kind: str, schema: Any) -> None:
    """`{}` is a schema (any JSON value), not "no format": Ollama constrains the output with it."""
    for parsed in (ollama_chat.parse(chat(format=fmt)), ollama_generate.parse(generate(format=fmt))):
        output = parsed.request.sampling.output_format
        assert output is not None and (output.kind, output.schema, output.param) == (kind, schema, "format")


@pytest.mark.parametrize("fmt", ["", None])
def test_empty_format_is_none(fmt: Any) -> None:
    assert ollama_generate.parse(generate(format=fmt)).request.sampling.output_format is None


@pytest.mark.parametrize(
    ("parse", "body"),
    [(CHAT, {"model": "m"}), (CHAT, chat(messages=[])), (GENERATE, {"model": "m"}), (GENERATE, generate(prompt=""))],
)
def test_empty_prompt_is_a_load_call(parse: Any, body: dict[str, Any]) -> None:
    parsed = parse(body)
    assert parsed.load_only and parsed.keep_alive is None
    given = {"messages": USER} if parse is CHAT else {"prompt": "go"}
    assert not parse({**body, **given}).load_only


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (chat(options={"mirostat": 2}), "options.mirostat"),
        (chat(options={"typical_p": 0.9}), "options.typical_p"),
        (chat(options={"num_gpu": 99}), "options.num_gpu"),
        (chat(unknown_field=1), "unknown_field"),
        (generate(images_too=["x"]), "images_too"),
    ],
)
def test_options_and_fields_we_do_not_honour_are_refused_by_name(body: dict[str, Any], param: str) -> None:
    parse = ollama_chat.parse if "messages" in body else ollama_generate.parse
    with pytest.raises(InvalidRequest) as caught:
        parse(body)
    assert caught.value.param == param and caught.value.status == 400
