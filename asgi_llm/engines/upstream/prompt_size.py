"""A prompt's exact size, asked of the upstream before its answer starts.

An OpenAI-compatible stream says how long the prompt was only at its end (`usage`), but an
Anthropic stream opens with it (`message_start`), and a stream cut short at a stop sequence
(stops are matched here: `stream.py`) never reaches its end. Upstreams that tokenize are asked
first, in the first dialect that answers (remembered per replica):

- asgi-llm: `/apply-template`, then `/tokenize` of that prompt, below the base URL;
- llama.cpp's server: the same two at its root;
- vLLM: `/tokenize` with the messages, at its root.

An upstream that answers none of them gets None (remembered): its size is then the first
usage chunk's. A failure here (unreachable, too slow) is never the request's: no size this
time, and the dialect is asked again next time.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

import anyio

from ...core.requests import ChatRequest, CompletionRequest, GenerationRequest
from .wire import chat_body

__all__ = ["PromptSizer", "wants_size"]

log = logging.getLogger("asgi_llm.upstream")


class _Response(Protocol):
    @property
    def status_code(self) -> int: ...

    def json(self) -> Any: ...


class Client(Protocol):
    """What is used of `httpx.AsyncClient` (only `engine.py` imports httpx)."""

    async def post(self, url: str, *, json: Any, timeout: Any = ..., auth: Any = ...) -> _Response: ...


Post = Callable[[str, dict[str, Any]], Awaitable[Any]]


def wants_size(request: GenerationRequest) -> bool:
    """Whether this request's stream needs the prompt's size before the upstream's end: it
    opens with it, or stop sequences may cut it short."""
    opens = isinstance(request, ChatRequest) and request.prompt_size_first
    return opens or bool(request.sampling.stop)


class PromptSizer:
    """Asks each replica in the dialect it answers, found once."""

    def __init__(self, model: str, timeout: float) -> None:
        self._model = model
        self._timeout = timeout
        self._dialects: dict[str, str | None] = {}  # replica base URL → the dialect it answers

    async def size(self, client: Client, base: str, auth: Any, request: GenerationRequest) -> int | None:
        """The prompt's tokens as the upstream will count them, or None where it cannot say."""
        if not wants_size(request):
            return None
        root = base.removesuffix("/v1")

        async def post(url: str, body: dict[str, Any]) -> Any:
            response = await client.post(url, json=body, timeout=self._timeout, auth=auth)
            return response.json() if response.status_code == 200 else None

        dialects = [self._dialects[base]] if base in self._dialects else ["asgi-llm", "llama-server", "vllm"]
        for dialect in dialects:
            if dialect is None:
                return None
            try:
                with anyio.fail_after(self._timeout):
                    count = await self._ask(dialect, request, base if dialect == "asgi-llm" else root, post)
            except Exception as exc:  # noqa: BLE001 (unreachable, or slow: no size this time, nothing learnt)
                log.debug("upstream prompt count (%s) failed: %s", dialect, type(exc).__name__)
                return None
            if count is not None:
                self._dialects[base] = dialect
                return count
        self._dialects[base] = None
        return None

    async def _ask(self, dialect: str, request: GenerationRequest, at: str, post: Post) -> int | None:
        if dialect == "vllm":
            body = {"model": self._model, **_prompt_fields(request, self._model), "add_generation_prompt": True}
            return _count(await post(at + "/tokenize", body))
        prompt = _text(request)
        if prompt is None:
            asked = {"model": self._model, **_prompt_fields(request, self._model)}
            applied = await post(at + "/apply-template", asked)
            prompt = applied.get("prompt") if isinstance(applied, Mapping) else None
            if not isinstance(prompt, str):
                return None
        tokenized = {"model": self._model, "content": prompt, "add_special": True, "parse_special": True}
        return _count(await post(at + "/tokenize", tokenized))


def _prompt_fields(request: GenerationRequest, model: str) -> dict[str, Any]:
    """The fields of a chat body that shape its prompt: its messages and tools."""
    if isinstance(request, CompletionRequest):
        return {"prompt": request.prompts[0]} if len(request.prompts) == 1 else {}
    body = chat_body(request, model)
    return {key: body[key] for key in ("messages", "tools", "tool_choice") if key in body}


def _text(request: GenerationRequest) -> str | None:
    """A completion's one text prompt, tokenized as it is (None for chat: its template first)."""
    if isinstance(request, CompletionRequest) and len(request.prompts) == 1 and isinstance(request.prompts[0], str):
        return request.prompts[0]
    return None


def _count(reply: Any) -> int | None:
    if not isinstance(reply, Mapping):
        return None
    count, tokens = reply.get("count"), reply.get("tokens")
    if isinstance(count, int) and not isinstance(count, bool) and count > 0:
        return count
    return len(tokens) if isinstance(tokens, list) and tokens else None
