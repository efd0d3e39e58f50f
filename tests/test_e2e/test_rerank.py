"""`/rerank` with the real model: the packaged chat model judges (P(yes) over its next token), and
ranks the obvious case right; the shapes are what the Cohere SDK (v1 and v2) and Jina's JSON
expect; bad input is a 400 naming the field; and a rank-pooling reranker GGUF, written here with
gguf-py from the packaged model's tokenizer, scores through llama.cpp's rank pooling."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import cohere
import httpx
import pytest

from asgi_llm import ModelConfig
from asgi_llm.core import ContextOverflow, RerankRequest
from asgi_llm.engines.inference_thread import InferenceThread
from asgi_llm.engines.llamacpp import LlamaCppEngine

from .conftest import MODEL, Server
from .gguf_writers import write_reranker

QUERY = "What is the capital of France?"
DOCUMENTS = ["Bananas are yellow.", "Paris is the capital of France.", "The sea is salty."]


def post(server: Server, path: str, body: dict[str, Any], status: int = 200) -> Any:
    reply = httpx.post(f"{server.url}/v1{path}", json=body, timeout=60)
    assert reply.status_code == status, reply.text
    return reply.json()


def test_the_packaged_model_ranks_the_answer_first_in_jinas_shape(server: Server) -> None:
    documents = [DOCUMENTS[0], {"text": DOCUMENTS[1]}, DOCUMENTS[2]]  # strings or {text}
    reply = post(server, "/rerank", {"model": MODEL, "query": QUERY, "documents": documents})
    results = reply["results"]
    assert results[0]["index"] == 1 and len(results) == 3
    assert results[0]["document"] == {"text": DOCUMENTS[1]}
    scores = [r["relevance_score"] for r in results]
    assert scores == sorted(scores, reverse=True) and all(0 < s < 1 for s in scores)
    assert reply["model"] == MODEL and reply["usage"]["prompt_tokens"] == reply["usage"]["total_tokens"] > 30
    again = post(server, "/rerank", {"model": MODEL, "query": QUERY, "documents": documents})
    # the same judgement again, with the prompts' prefix read from the cache this time: llama.cpp's
    # sums differ a little with the batch's shape, so the scores agree closely, not to the bit
    assert again["results"][0]["index"] == 1
    again_scores = {r["index"]: r["relevance_score"] for r in again["results"]}
    assert all(again_scores[r["index"]] == pytest.approx(r["relevance_score"], abs=0.05) for r in results)


def test_top_n_and_return_documents(server: Server) -> None:
    body = {"model": "default", "query": QUERY, "documents": DOCUMENTS, "top_n": 1, "return_documents": False}
    assert post(server, "/rerank", body)["results"] == [{"index": 1, "relevance_score": pytest.approx(0.5, abs=0.5)}]


def test_the_cohere_sdk_v1_and_v2(server: Server) -> None:
    with httpx.Client(timeout=60) as http:
        _cohere_v1_and_v2(server, http)


def _cohere_v1_and_v2(server: Server, http: httpx.Client) -> None:
    v1 = cohere.Client(api_key="not-checked", base_url=server.url, httpx_client=http)
    ranked = v1.rerank(model=MODEL, query=QUERY, documents=DOCUMENTS, top_n=2, return_documents=True)
    assert ranked.results[0].index == 1 and len(ranked.results) == 2
    assert ranked.results[0].document is not None and ranked.results[0].document.text == DOCUMENTS[1]
    v2 = cohere.ClientV2(api_key="not-checked", base_url=f"{server.url}/v1", httpx_client=http)
    ranked2 = v2.rerank(model=MODEL, query=QUERY, documents=DOCUMENTS, top_n=3)
    assert [r.index for r in ranked2.results] == [r.index for r in ranked.results] + [ranked2.results[2].index]
    assert ranked2.results[0].relevance_score == pytest.approx(ranked.results[0].relevance_score)


def test_the_model_list_says_how_each_model_ranks(server: Server) -> None:
    models = httpx.get(f"{server.url}/v1/models", timeout=60).json()["data"]
    assert {m["id"]: m["rerank"] for m in models} == {MODEL: "judge", "chat-only": "judge"}


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"documents": []}, "documents"),
        ({"top_n": 0}, "top_n"),
        ({"documents": ["a", {"text": 1}]}, "documents[1]"),
        ({"documents": ["a", {"text": "b", "title": "c"}]}, "documents[1].title"),
        ({"query": ""}, "query"),
        ({"rank_fields": ["text"]}, "rank_fields"),
        ({"documents": ["short", "word " * 3000]}, "documents[1]"),  # over the context
    ],
)
def test_bad_input_is_a_400_naming_the_field(server: Server, body: dict[str, Any], param: str) -> None:
    full = {"model": MODEL, "query": QUERY, "documents": DOCUMENTS, **body}
    assert post(server, "/rerank", full, 400)["error"]["param"] == param


@pytest.fixture(scope="module")
async def reranker(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[LlamaCppEngine]:
    path = write_reranker(tmp_path_factory.mktemp("rank") / "reranker.gguf")
    thread = InferenceThread()
    thread.start()
    config = ModelConfig(id="reranker", path=str(path), rerank=True, n_ctx=256, n_threads=1, parallel=1)
    engine = LlamaCppEngine(config.model_copy(update={"prompt_cache_mib": 0}), thread)
    try:
        await engine.load()
        yield engine
    finally:
        await engine.close()
        await thread.stop()


@pytest.mark.anyio
@pytest.mark.model
async def test_a_rank_pooling_gguf_scores_each_pair_with_its_classifier(reranker: LlamaCppEngine) -> None:
    assert reranker.rerank_kind == "rank"
    request = RerankRequest("reranker", QUERY, tuple(DOCUMENTS))
    result = await reranker.rerank(request)
    assert len(result.scores) == 3 and all(0 < s < 1 for s in result.scores)  # yes of a softmax over yes, no
    assert len(set(result.scores)) == 3  # each pair read on its own: random weights, different scores
    assert result == await reranker.rerank(request)
    alone = await reranker.rerank(RerankRequest("reranker", QUERY, (DOCUMENTS[1],)))
    assert alone.scores[0] == pytest.approx(result.scores[1], abs=1e-5)
    with pytest.raises(ContextOverflow) as overflow:
        await reranker.rerank(RerankRequest("reranker", QUERY, ("a", "word " * 400)))
    assert overflow.value.param == "documents[1]"


@pytest.mark.slow  # gguf-py writes the whole file
def test_the_writer_wrote_a_reranker(tmp_path: Path) -> None:
    path = write_reranker(tmp_path / "r.gguf", template="query: {query}\ndocument: {document}")
    assert path.stat().st_size > 1_000_000
