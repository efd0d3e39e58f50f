"""Golden files for the OpenAI adapters' pure functions.

Each case folder holds the inputs (`request.json`, plus `events.json` for generation,
`result.json` for embeddings) and the expected outputs: `parsed.json` (the core request),
`response.json` (the non-stream render) and `stream.txt` (the exact SSE bytes).
Run with `UPDATE_GOLDEN=1` to rewrite the expected outputs, then read the diff.
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from asgi_llm.adapters.base import Meta, Parsed
from asgi_llm.adapters.openai import (
    chat as openai_chat,
)
from asgi_llm.adapters.openai import (
    completions as openai_completions,
)
from asgi_llm.adapters.openai import (
    embeddings as openai_embeddings,
)
from asgi_llm.adapters.openai import (
    models as openai_models,
)
from asgi_llm.adapters.openai.common import render_error
from asgi_llm.core import Embedding, EmbeddingResult, GenerationEvent, LLMError, ModelCard, ModelNotFound

META = Meta(request_id="test", created=1700000000, model="m")

LoadJson = Callable[[Path, str], Any]
CheckOutputs = Callable[[Path, Parsed[Any, Any], Any, bytes | None], None]
LoadCatalog = Callable[[str], list[ModelCard]]


@pytest.fixture
def check_generation(
    load_json: LoadJson, check_outputs: CheckOutputs, core_events: Callable[[Any], list[GenerationEvent]]
) -> Callable[[Any, Any, Path], None]:
    """`check_generation(module, encoder, case)`: its parse, render and stream against the case's golden files."""

    def check(module: Any, encoder: Any, case: Path) -> None:
        parsed = module.parse(load_json(case, "request.json"))
        events = core_events(load_json(case, "events.json"))
        stream = encoder(parsed, META)
        body = stream.open() + b"".join(stream.event(e) for e in events) + stream.close()
        check_outputs(case, parsed, module.render(parsed, META, events), body)

    return check


def test_chat(openai_chat_case: Path, check_generation: Callable[[Any, Any, Path], None]) -> None:
    check_generation(openai_chat, openai_chat.ChatStream, openai_chat_case)


def test_completions(openai_completions_case: Path, check_generation: Callable[[Any, Any, Path], None]) -> None:
    check_generation(openai_completions, openai_completions.CompletionStream, openai_completions_case)


def _embedding_result(raw: dict[str, Any]) -> EmbeddingResult:
    return EmbeddingResult(tuple(Embedding(tuple(e["vector"]), e["tokens"]) for e in raw["embeddings"]))


def test_embeddings(openai_embeddings_case: Path, load_json: LoadJson, check_outputs: CheckOutputs) -> None:
    case = openai_embeddings_case
    parsed = openai_embeddings.parse(load_json(case, "request.json"))
    result = _embedding_result(load_json(case, "result.json"))
    check_outputs(case, parsed, openai_embeddings.render(parsed, META, result), None)


def test_embeddings_base64_is_float32_little_endian(load_json: LoadJson) -> None:
    case = Path(__file__).parent / "golden" / "openai_embeddings" / "base64"
    parsed = openai_embeddings.parse(load_json(case, "request.json"))
    result = _embedding_result(load_json(case, "result.json"))
    body = openai_embeddings.render(parsed, META, result)
    assert len(body["data"]) == len(result.embeddings) == 2
    for item, embedding in zip(body["data"], result.embeddings):
        raw = base64.b64decode(item["embedding"], validate=True)
        assert len(raw) == 4 * len(embedding.vector)
        assert struct.unpack(f"<{len(embedding.vector)}f", raw) == embedding.vector


def test_models(
    openai_models_case: Path,
    load_json: LoadJson,
    check_json: Callable[[Path, str, Any], None],
    load_catalog: LoadCatalog,
) -> None:
    request = load_json(openai_models_case, "request.json")
    handler = getattr(openai_models, request["handler"])
    try:
        status, body = handler(load_catalog("openai_models"), request["params"])
    except LLMError as error:
        status, body = render_error(error)
    check_json(openai_models_case, "response.json", {"status": status, "body": body})


def test_model_alias_resolves_to_its_card(load_catalog: LoadCatalog) -> None:
    status, body = openai_models.get_model(load_catalog("openai_models"), {"model": "default"})
    assert (status, body["id"]) == (200, "qwen2.5-0.5b-instruct")


def test_unknown_model_raises_model_not_found(load_catalog: LoadCatalog) -> None:
    with pytest.raises(ModelNotFound) as caught:
        openai_models.get_model(load_catalog("openai_models"), {"model": "qwen2.5"})  # a prefix of an id is not a match
    assert caught.value.param == "model"
    assert caught.value.status == 404
