"""Reranking: `POST /rerank` and `/v2/rerank` in the shapes Jina, Cohere, vLLM and llama-server
share (`query`, `documents` as strings or `{text}`, `top_n`, `return_documents` in; `results`
of `{index, relevance_score, document}`, best first, and `usage` out)."""

from __future__ import annotations

from typing import Annotated, Any, TypedDict

from pydantic import Field

from asgi_llm.core import InvalidRequest, RerankRequest, RerankResult

from ..base import Meta, Parsed, RerankRoute, refuse_unrecognized, validate
from .common import Wire

__all__ = ["ROUTES", "parse", "render"]


class TextDocument(Wire):
    text: str


class RerankBody(Wire):
    model: str
    query: str
    documents: list[str | TextDocument]
    top_n: Annotated[int, Field(ge=1)] | None = None
    return_documents: bool = True
    """Jina's and vLLM's default; Cohere's v1 asks for it, its v2 leaves documents out of replies."""
    user: str | None = None


class DocumentText(TypedDict):
    text: str


class RerankResultItem(TypedDict, total=False):
    index: int
    relevance_score: float
    document: DocumentText


class RerankUsage(TypedDict):
    prompt_tokens: int
    total_tokens: int


class RerankReply(TypedDict):
    id: str
    object: str
    model: str
    results: list[RerankResultItem]
    usage: RerankUsage


def parse(body: Any) -> Parsed[RerankRequest, bool]:
    """The options: whether documents go back in the results."""
    wire = validate(RerankBody, body)
    refuse_unrecognized(wire)
    if not wire.documents:
        raise InvalidRequest("'documents' must not be empty.", param="documents")
    texts = []
    for i, document in enumerate(wire.documents):
        if isinstance(document, TextDocument):
            refuse_unrecognized(document, prefix=f"documents[{i}].")
        texts.append(document if isinstance(document, str) else document.text)
    if not wire.query:
        raise InvalidRequest("'query' must not be empty.", param="query")
    request = RerankRequest(wire.model, wire.query, tuple(texts), top_n=wire.top_n, user=wire.user)
    return Parsed(request, wire.return_documents)


def render(parsed: Parsed[RerankRequest, bool], meta: Meta, result: RerankResult) -> RerankReply:
    documents = parsed.request.documents
    ranked = sorted(range(len(result.scores)), key=lambda i: (-result.scores[i], i))
    results: list[RerankResultItem] = []
    for i in ranked[: parsed.request.top_n]:
        item = RerankResultItem(index=i, relevance_score=result.scores[i])
        if parsed.options:
            item["document"] = {"text": documents[i]}
        results.append(item)
    return {
        "id": f"rerank-{meta.request_id}",
        "object": "list",
        "model": meta.model,
        "results": results,
        "usage": {"prompt_tokens": result.prompt_tokens, "total_tokens": result.prompt_tokens},
    }


ROUTES = (
    RerankRoute(path="/rerank", parse=parse, render=render, body=RerankBody),
    RerankRoute(path="/v2/rerank", parse=parse, render=render, body=RerankBody),  # Cohere's v2 client, vLLM
)
