"""An upstream's answers, read. Its streamed answer: the lines of its SSE body as decoded chunks
(None for `[DONE]`, `ENDED` once the stream stops without it), the idle timeout between chunks
once the answer has begun, and the first batch of events put back in front of the rest. Its
embeddings answer as core embeddings. No HTTP here: `engine.py` hands in what it received.
"""

from __future__ import annotations

import contextlib
import json
import re
import types
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from typing import Any

import anyio

from ...core.errors import BadGateway, GatewayTimeout
from ...core.events import Embedding, EmbeddingResult, EngineEvent
from .errors import error_from_body
from .stream import SSEDecoder, usage_of

__all__ = ["ENDED", "chunks", "decoded", "embeddings", "next_chunk", "prepend", "sse_lines"]

ENDED: Mapping[str, Any] = types.MappingProxyType({})
"""The upstream closed its stream without `[DONE]`."""


_LINE_END = re.compile("\r\n|\r|\n")


async def sse_lines(text: AsyncIterator[str]) -> AsyncGenerator[str, None]:
    """The lines of an SSE body, ended where SSE ends them (CRLF, LF or CR) and nowhere else.
    httpx's `aiter_lines` ends one at every break `str.splitlines()` knows, U+0085 and U+2028
    among them, which an upstream may write raw inside a JSON string (llama-server and vLLM do)."""
    rest = ""
    async for text_piece in text:
        rest += text_piece
        held = rest.endswith("\r")  # perhaps half of a CRLF: ended once the next piece shows
        *lines, rest = _LINE_END.split(rest[:-1] if held else rest)
        for line in lines:
            yield line
        rest += "\r" if held else ""
    if rest:
        yield rest.removesuffix("\r")


async def chunks(lines: AsyncIterator[str], *, secrets: list[str]) -> AsyncGenerator[Mapping[str, Any] | None, None]:
    """Decoded chunks, then None for `[DONE]`; an error chunk raises its core error, `secrets`
    cut out of its message."""
    decoder = SSEDecoder()
    async for line in lines:
        data = decoder.line(line)
        if data is not None and data.strip() == "[DONE]":
            yield None
            return
        if data is not None:
            yield _chunk(data, secrets)
    data = decoder.flush()
    if data is not None:
        yield None if data.strip() == "[DONE]" else _chunk(data, secrets)


async def next_chunk(
    chunks: AsyncIterator[Mapping[str, Any] | None], *, idle_timeout: float | None
) -> Mapping[str, Any] | None:
    """The next chunk (None for `[DONE]`, `ENDED` once the stream ends without it); once events
    have gone out, within `idle_timeout` (None before: the first event has a timeout of its own)."""
    try:
        if idle_timeout is None:
            return await anext(chunks)
        with anyio.fail_after(idle_timeout):
            return await anext(chunks)
    except StopAsyncIteration:
        return ENDED
    except TimeoutError:
        raise GatewayTimeout("The upstream server went silent mid-answer.") from None


def decoded(data: str) -> dict[str, Any]:
    """One JSON object the upstream sent; anything else is a 502."""
    try:
        value = json.loads(data)
    except ValueError:
        raise BadGateway("The upstream server sent something that is not JSON.") from None
    if not isinstance(value, dict):
        raise BadGateway("The upstream server sent an unexpected answer.")
    return value


def embeddings(body: Mapping[str, Any], sizes: list[int]) -> EmbeddingResult:
    """The embeddings answer to inputs of these sizes, in input order; its usage split over them."""
    data = sorted((d for d in body.get("data") or () if isinstance(d, Mapping)), key=lambda d: d.get("index", 0))
    if len(data) != len(sizes):
        raise BadGateway("The upstream server answered with the wrong number of embeddings.")
    total = usage_of(body.get("usage") or {}).prompt_tokens
    shares = _shares(total, sizes)
    return EmbeddingResult(tuple(Embedding(tuple(map(float, d["embedding"])), n) for d, n in zip(data, shares)))


async def prepend(
    first: list[EngineEvent], rest: AsyncGenerator[list[EngineEvent], None]
) -> AsyncGenerator[list[EngineEvent], None]:
    """`first`, then the batches of `rest` (closed with this generator)."""
    async with contextlib.aclosing(rest):
        yield first
        async for batch in rest:
            yield batch


def _chunk(data: str, secrets: list[str]) -> Mapping[str, Any]:
    chunk = decoded(data)
    if "error" in chunk and not chunk.get("choices"):
        raise error_from_body(chunk, secrets=secrets)
    return chunk


def _shares(total: int, sizes: list[int]) -> list[int]:
    """`total` tokens split over inputs in proportion to their sizes (the rest on the first)."""
    weight = sum(sizes) or 1
    shares = [total * size // weight for size in sizes]
    if shares:
        shares[0] += total - sum(shares)
    return shares
