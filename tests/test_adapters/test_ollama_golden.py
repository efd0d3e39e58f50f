"""Golden files for the Ollama adapters' pure functions, checked against the official client's types.

Each case folder holds the inputs (`request.json`, plus `events.json` for generation,
`result.json` for embeddings) and the expected outputs: `parsed.json` (the core request),
`response.json` (the `stream: false` render) and `stream.txt` (the exact NDJSON bytes,
timed by a fake clock). A load call (no prompt) has no events and no stream: the glue
renders it without generating. Run with `UPDATE_GOLDEN=1` to rewrite the expected outputs, then
read the diff.
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ollama
import pytest
from pydantic import BaseModel

from asgi_llm.adapters.base import Meta
from asgi_llm.adapters.ollama import OLLAMA, render_error
from asgi_llm.adapters.ollama import (
    chat as ollama_chat,
)
from asgi_llm.adapters.ollama import (
    common as ollama_common,
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
from asgi_llm.adapters.ollama import (
    stream as ollama_stream,
)
from asgi_llm.core import (
    Embedding,
    EmbeddingResult,
    Finish,
    GenerationEvent,
    LLMError,
    ModelCard,
    ModelNotFound,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    Usage,
)

META = Meta(request_id="test", created=1700000000, model="SmolLM2-135M-Instruct")
START_NS = 9_000_000_000  # the request's start (its parse), on the replies' clock
NOW_NS = START_NS + 2_500_000_000  # the non-stream render's "now"


def started() -> int:
    return START_NS


UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"
GOLDEN = Path(__file__).parent / "golden"


def conforms(model: type[BaseModel], body: Any) -> BaseModel:
    """Valid for the official client, and with no top-level field the client does not know."""
    known = {field.alias or name for name, field in model.model_fields.items()}
    assert set(body) <= known, set(body) - known
    return model.model_validate(body)


def fake_clock(step_ns: int = 250_000_000) -> Callable[[], int]:
    ticks = itertools.count(start=10_000_000_000, step=step_ns)
    return lambda: next(ticks)


def _stream_lines(data: bytes) -> list[dict[str, Any]]:
    assert data.endswith(b"\n"), data[-40:]
    return [json.loads(line) for line in data[:-1].split(b"\n")]


def _check_generation(golden: Any, module: Any, encoder: Any, response_type: type[BaseModel], case: Path) -> None:
    parsed = module.parse(golden.load(case, "request.json"), clock=started)
    golden.check_json(case, "parsed.json", golden.parsed_json(parsed))
    if parsed.load_only:
        assert not (case / "events.json").exists() and not (case / "stream.txt").exists()
        body = module.render(parsed, META, [])
        conforms(response_type, body)
        golden.check_json(case, "response.json", body)
        return
    events = golden.events(golden.load(case, "events.json"))
    body = module.render(parsed, META, events, now_ns=lambda: NOW_NS)
    conforms(response_type, body)
    assert body["done"] is True
    golden.check_json(case, "response.json", body)
    stream = encoder(parsed, META, clock=fake_clock())
    data = stream.open() + b"".join(stream.event(e) for e in events) + stream.close()
    assert stream.media_type == "application/x-ndjson"
    lines = _stream_lines(data)
    for line in lines:
        conforms(response_type, line)
    assert [line["done"] for line in lines] == [False] * (len(lines) - 1) + [True]
    golden.check_bytes(case, "stream.txt", data)


def test_chat(golden: Any, ollama_chat_case: Path) -> None:
    _check_generation(golden, ollama_chat, ollama_chat.ChatStream, ollama.ChatResponse, ollama_chat_case)


def test_generate(golden: Any, ollama_generate_case: Path) -> None:
    _check_generation(
        golden, ollama_generate, ollama_generate.GenerateStream, ollama.GenerateResponse, ollama_generate_case
    )


def _embedding_result(golden: Any, case: Path) -> EmbeddingResult:
    raw = golden.load(case, "result.json")["embeddings"]
    return EmbeddingResult(tuple(Embedding(tuple(e["vector"]), e["tokens"]) for e in raw))


def test_embed(golden: Any, ollama_embed_case: Path) -> None:
    parsed = ollama_embed.parse_embed(golden.load(ollama_embed_case, "request.json"), clock=started)
    golden.check_json(ollama_embed_case, "parsed.json", golden.parsed_json(parsed))
    body = ollama_embed.render_embed(parsed, META, _embedding_result(golden, ollama_embed_case), now_ns=lambda: NOW_NS)
    conforms(ollama.EmbedResponse, body)
    golden.check_json(ollama_embed_case, "response.json", body)


def test_legacy_embeddings(golden: Any, ollama_embeddings_case: Path) -> None:
    parsed = ollama_embed.parse_embeddings(golden.load(ollama_embeddings_case, "request.json"), clock=started)
    golden.check_json(ollama_embeddings_case, "parsed.json", golden.parsed_json(parsed))
    body = ollama_embed.render_embeddings(parsed, META, _embedding_result(golden, ollama_embeddings_case))
    conforms(ollama.EmbeddingsResponse, body)
    golden.check_json(ollama_embeddings_case, "response.json", body)


_HANDLERS: dict[str, tuple[Callable[[list[ModelCard], Any], tuple[int, Any]], type[BaseModel] | None]] = {
    "tags": (lambda catalog, body: ollama_models.tags(catalog), ollama.ListResponse),
    "ps": (lambda catalog, body: ollama_models.ps(catalog), ollama.ProcessResponse),
    "show": (ollama_models.show, ollama.ShowResponse),
    "pull": (ollama_models.pull, ollama.ProgressResponse),
    "version": (lambda catalog, body: ollama_models.version(), None),
    "running": (lambda catalog, body: ollama_models.running(), None),
}


def test_models(golden: Any, ollama_models_case: Path) -> None:
    request = golden.load(ollama_models_case, "request.json")
    handler, response_type = _HANDLERS[request["handler"]]
    try:
        status, body = handler(golden.catalog("ollama_models"), request.get("body"))
    except LLMError as error:
        status, body = render_error(error)
        assert set(body) == {"error"}
    else:
        if response_type is not None:
            conforms(response_type, body)
    golden.check_json(ollama_models_case, "response.json", {"status": status, "body": body})


def test_routes_cover_the_api() -> None:
    paths = {(route.path, route.methods) for route in OLLAMA.routes}
    assert paths == {
        ("/api/chat", ("POST",)),
        ("/api/generate", ("POST",)),
        ("/api/embed", ("POST",)),
        ("/api/embeddings", ("POST",)),
        ("/api/tags", ("GET",)),
        ("/api/show", ("POST",)),
        ("/api/pull", ("POST",)),
        ("/api/ps", ("GET",)),
        ("/api/version", ("GET",)),
        ("/", ("GET", "HEAD")),
    }


@pytest.mark.parametrize("error", [LLMError("boom"), ModelNotFound("x")])
def test_errors_are_one_message(error: LLMError) -> None:
    status, body = render_error(error)
    assert status == error.status and body == {"error": error.message}
    stream = ollama_chat.ChatStream(
        ollama_chat.parse({"model": "m", "messages": [{"role": "user", "content": "hi"}]}), META
    )
    line = stream.error(error)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert json.loads(line) == {"error": error.message}


def test_tool_call_arguments_must_be_an_object() -> None:
    parsed = ollama_chat.parse({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    stream = ollama_chat.ChatStream(parsed, META, clock=fake_clock())
    assert stream.event(ToolCallStart("c", "f")) == stream.event(ToolCallDelta("[1, 2]")) == b""
    with pytest.raises(LLMError) as caught:
        stream.event(ToolCallEnd())
    assert caught.value.status == 500 and "'f'" in caught.value.message


def test_parallel_tool_calls_arrive_whole_in_end_order() -> None:
    events: list[GenerationEvent] = [
        ToolCallStart("a", "first", call_index=0),
        ToolCallStart("b", "second", call_index=1),
        ToolCallDelta('{"x": ', call_index=0),
        ToolCallDelta("{}", call_index=1),
        ToolCallEnd(call_index=1),
        ToolCallDelta("1}", call_index=0),
        ToolCallEnd(call_index=0),
        Finish("tool_calls", Usage(5, 7)),
    ]
    parsed = ollama_chat.parse({"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": False})
    body = ollama_chat.render(parsed, META, events, now_ns=lambda: NOW_NS)
    reply = conforms(ollama.ChatResponse, body)
    assert isinstance(reply, ollama.ChatResponse) and reply.message.tool_calls is not None
    calls = [(c.function.name, dict(c.function.arguments)) for c in reply.message.tool_calls]
    assert calls == [("second", {}), ("first", {"x": 1})]
    assert reply.done_reason == "stop"


@pytest.mark.parametrize(
    "module", [ollama_chat, ollama_generate, ollama_embed, ollama_models, ollama_common, ollama_stream]
)
def test_all_names_resolve(module: Any) -> None:
    assert module.__all__ and all(getattr(module, name) is not None for name in module.__all__)


@pytest.mark.parametrize(
    ("count", "written"),
    [(134_515_008, "135M"), (7_615_616_512, "7.62B"), (70_553_706_496, "70.6B"), (1_500, "1.50K"), (999, "999")],
)
def test_parameter_counts_are_written_as_ollama_writes_them(count: int, written: str) -> None:
    assert ollama_models.human_number(count) == written
