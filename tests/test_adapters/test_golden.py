"""Golden files for the OpenAI adapters' pure functions.

Each case folder holds the inputs (`request.json`, plus `events.json` for generation,
`result.json` for embeddings) and the expected outputs: `parsed.json` (the core request),
`response.json` (the non-stream render) and `stream.txt` (the exact SSE bytes).
Run with `UPDATE_GOLDEN=1` to rewrite the expected outputs, then read the diff.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import struct
from pathlib import Path
from typing import Any

import pytest

from asgi_llm.adapters import (
    openai_chat,
    openai_completions,
    openai_embeddings,
    openai_models,
)
from asgi_llm.adapters.base import Meta, Parsed
from asgi_llm.adapters.openai_common import render_error
from asgi_llm.core import (
    Embedding,
    EmbeddingResult,
    Finish,
    GenerationEvent,
    LLMError,
    ModelCard,
    ModelNotFound,
    TextDelta,
    TokenLogprob,
    TopLogprob,
    Usage,
)

META = Meta(request_id="test", created=1700000000, model="m")
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"


def _load(case: Path, name: str) -> Any:
    return json.loads((case / name).read_text(encoding="utf-8"))


def _check_json(case: Path, name: str, actual: Any) -> None:
    actual = json.loads(json.dumps(actual))  # tuples → lists, as the wire sees it
    path = case / name
    if UPDATE:
        path.write_text(json.dumps(actual, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    assert path.is_file(), f"missing golden {path}; run with UPDATE_GOLDEN=1"
    assert actual == _load(case, name)


def _check_bytes(case: Path, name: str, actual: bytes) -> None:
    path = case / name
    if UPDATE:
        path.write_bytes(actual)
    assert path.is_file(), f"missing golden {path}; run with UPDATE_GOLDEN=1"
    assert actual == path.read_bytes()


def _parsed_json(parsed: Parsed[Any]) -> dict[str, Any]:
    options = parsed.options
    if dataclasses.is_dataclass(options) and not isinstance(options, type):
        options = dataclasses.asdict(options)
    return {"request": dataclasses.asdict(parsed.request), "stream": parsed.stream, "options": options}


def _logprob(raw: dict[str, Any]) -> TokenLogprob:
    top = tuple(TopLogprob(t["token"], t["logprob"], t["token"].encode()) for t in raw.get("top", ()))
    return TokenLogprob(raw["token"], raw["logprob"], raw["token"].encode(), top)


def _event(raw: dict[str, Any]) -> GenerationEvent:
    if raw["type"] == "text":
        return TextDelta(raw["text"], raw["index"], tuple(_logprob(t) for t in raw.get("logprobs", ())))
    return Finish(raw["reason"], Usage(**raw["usage"]), raw["index"], raw.get("stop_sequence"))


def _check_generation(module: Any, encoder: Any, case: Path) -> None:
    parsed = module.parse(_load(case, "request.json"))
    events = [_event(e) for e in _load(case, "events.json")]
    _check_json(case, "parsed.json", _parsed_json(parsed))
    _check_json(case, "response.json", module.render(parsed, META, events))
    stream = encoder(parsed, META)
    _check_bytes(case, "stream.txt", stream.open() + b"".join(stream.event(e) for e in events) + stream.close())


def test_chat(openai_chat_case: Path) -> None:
    _check_generation(openai_chat, openai_chat.ChatStream, openai_chat_case)


def test_completions(openai_completions_case: Path) -> None:
    _check_generation(openai_completions, openai_completions.CompletionStream, openai_completions_case)


def _embedding_result(case: Path) -> EmbeddingResult:
    raw = _load(case, "result.json")["embeddings"]
    return EmbeddingResult(tuple(Embedding(tuple(e["vector"]), e["tokens"]) for e in raw))


def test_embeddings(openai_embeddings_case: Path) -> None:
    parsed = openai_embeddings.parse(_load(openai_embeddings_case, "request.json"))
    _check_json(openai_embeddings_case, "parsed.json", _parsed_json(parsed))
    _check_json(
        openai_embeddings_case,
        "response.json",
        openai_embeddings.render(parsed, META, _embedding_result(openai_embeddings_case)),
    )


def test_embeddings_base64_is_float32_little_endian() -> None:
    case = Path(__file__).parent / "golden" / "openai_embeddings" / "base64"
    parsed = openai_embeddings.parse(_load(case, "request.json"))
    result = _embedding_result(case)
    body = openai_embeddings.render(parsed, META, result)
    assert len(body["data"]) == len(result.embeddings) == 2
    for item, embedding in zip(body["data"], result.embeddings):
        raw = base64.b64decode(item["embedding"], validate=True)
        assert len(raw) == 4 * len(embedding.vector)
        assert struct.unpack(f"<{len(embedding.vector)}f", raw) == embedding.vector


def _catalog() -> list[ModelCard]:
    raw = json.loads((Path(__file__).parent / "golden" / "openai_models" / "catalog.json").read_text())
    return [ModelCard(**{**card, "aliases": tuple(card["aliases"])}) for card in raw]


def test_models(openai_models_case: Path) -> None:
    request = _load(openai_models_case, "request.json")
    handler = getattr(openai_models, request["handler"])
    try:
        status, body = handler(_catalog(), request["params"])
    except LLMError as error:
        status, body = render_error(error)
    _check_json(openai_models_case, "response.json", {"status": status, "body": body})


def test_model_alias_resolves_to_its_card() -> None:
    status, body = openai_models.get_model(_catalog(), {"model": "default"})
    assert (status, body["id"]) == (200, "qwen2.5-0.5b-instruct")


def test_unknown_model_raises_model_not_found() -> None:
    with pytest.raises(ModelNotFound) as caught:
        openai_models.get_model(_catalog(), {"model": "qwen2.5"})  # a prefix of an id is not a match
    assert caught.value.param == "model"
    assert caught.value.status == 404
