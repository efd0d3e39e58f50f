"""Token logprobs as OpenAI's chat and Responses APIs write them, and Ollama after them: the
token, its logprob, its UTF-8 bytes and the most likely alternatives. Written once here for
every protocol that speaks this shape (OpenAI's legacy completions have their own)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypedDict

from asgi_llm.core import TokenLogprob

__all__ = ["TokenLogprobDict", "TopLogprobDict", "token_logprobs"]


class TopLogprobDict(TypedDict):
    token: str
    logprob: float
    bytes: list[int]


class TokenLogprobDict(TypedDict):
    token: str
    logprob: float | None
    bytes: list[int]
    top_logprobs: list[TopLogprobDict]


def token_logprobs(tokens: Sequence[TokenLogprob]) -> list[TokenLogprobDict]:
    return [
        {
            "token": t.token,
            "logprob": t.logprob,
            "bytes": list(t.bytes),
            "top_logprobs": [{"token": o.token, "logprob": o.logprob, "bytes": list(o.bytes)} for o in t.top],
        }
        for t in tokens
    ]
