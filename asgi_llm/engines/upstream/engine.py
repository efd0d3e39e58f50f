"""A model served by an OpenAI-compatible upstream over HTTP: llama.cpp's server, vLLM, a cloud
provider, another asgi-llm. With `discovery.py`, the only modules that import `httpx`.

Core requests go out as streamed chat completions / completions and embeddings (`wire.py`); the
upstream's SSE comes back as core events (`reading.py`, `stream.py`), its errors as core errors
(`errors.py`).
A request goes to the replica with the fewest requests in flight, and moves on to another if this
one fails before the first event is ready (nothing has reached our client yet); after that, a
failure ends the stream with an error. Closing the event stream (our client left) closes the
upstream connection, which stops the upstream's generation.

Timeouts: `connect_timeout` to connect; `first_byte_timeout` from sending the request to the first
event; `idle_timeout` between events after that. The upstream's key is read from the environment
variable `api_key_env` at construction and never shown: not in errors, logs or `describe()`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from typing import Any

import anyio
import httpx
from pydantic import SecretStr

from ...config import ModelConfig
from ...core.engine import Embedder, EngineHealth, ImageReader
from ...core.errors import BadGateway, GatewayTimeout, LLMError, Unavailable, Unsupported
from ...core.events import EmbeddingResult, EngineEvent
from ...core.memory import MemoryEstimate
from ...core.requests import CompletionRequest, EmbeddingRequest, GenerationRequest
from ...support.tasks import cancel_and_wait, spawn
from .discovery import discover, discover_settings, list_models
from .errors import error_from_response, retryable, scrub
from .prompt_size import PromptSizer
from .reading import ENDED, chunks, decoded, embeddings, next_chunk, prepend, sse_lines
from .replicas import Replica, ReplicaSet
from .stream import translator_for, usage_of
from .tracing import upstream_call
from .wire import (
    chat_body,
    chat_from_completion,
    count_body,
    embedding_body,
    estimate_prompt_tokens,
    generation_body,
    generation_path,
)

__all__ = ["UpstreamEngine", "discover", "discover_settings", "list_models"]


log = logging.getLogger("asgi_llm.upstream")


class _Retry(Exception):
    """This replica failed before anything was sent to the client; another may serve."""

    def __init__(self, error: LLMError, *, unhealthy: bool = True) -> None:
        super().__init__(error.message)
        self.error = error
        self.unhealthy = unhealthy


class _NotFound(Exception):
    """The upstream has no such endpoint (404 / 405)."""


class UpstreamEngine(Embedder, ImageReader):
    """One model on one or more upstream replicas; nothing here runs a model in this process. It
    embeds; it neither reranks nor tokenizes (no standard OpenAI endpoint does), and LoRA adapters
    are the upstream's business. It takes images and sends them on as OpenAI chat's `image_url`
    parts, as the client sent them: whether the upstream's model reads them is the upstream's to say."""

    def __init__(self, config: ModelConfig, *, environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        self.config = config
        self._model = config.upstream_model or config.id
        self._key = SecretStr(env.get(config.api_key_env, "")) if config.api_key_env else None
        interval = config.health_interval
        self._auth = {
            _bare(url): _basic_auth(url) for url in config.upstream_urls
        }  # credentials out of URLs (and logs)
        self._given_urls = config.upstream_urls
        self.replicas = ReplicaSet(list(self._auth), interval=interval, max_backoff=3 * max(interval, 1.0))
        self._sizer = PromptSizer(self._model, 2 * config.connect_timeout)  # a prompt's size, asked first
        self._client: httpx.AsyncClient | None = None
        self._watch: asyncio.Task[None] | None = None
        self._context: int | None = None
        self.progress = 0.0  # no weights to read here: its load opens connections and checks the replicas
        self.waiting = 0  # requests queue at the upstream, not here
        self.memory: MemoryEstimate | None = None  # the model is held by the upstream, not in this process

    @property
    def reads_images(self) -> bool:
        return True

    @property
    def context_length(self) -> int:
        return self._context or self.config.n_ctx

    def health(self) -> EngineHealth:
        """An upstream's own faults are its requests' errors; its replicas' health is in `describe`."""
        return EngineHealth()

    def describe(self) -> dict[str, Any]:
        """Backend facts for `/health`: no URL (it may carry credentials), no key."""
        return {"backend": "upstream", "upstream_model": self._model, "replicas": self.replicas.describe()}

    async def load(self) -> None:
        """Open the connection pool and check every replica once; an upstream that is down now
        does not fail the load (requests get 503 until it is back)."""
        self._client = _client(self.config, self._key)
        await self.replicas.check(self._probe, self.replicas.replicas)
        if not any(r.healthy for r in self.replicas.replicas):
            log.warning("model %s: no upstream replica answers yet", self.config.id)
        self._watch = spawn(self.replicas.watch(self._probe), name=f"replica watch of {self.config.id}", log=log)

    async def close(self) -> None:
        if self._watch is not None:
            await cancel_and_wait(self._watch)
        if self._client is not None:
            await self._client.aclose()
        self._client = self._watch = None

    def generate(self, request: GenerationRequest) -> AsyncGenerator[EngineEvent, None]:
        return self._generate(request)

    async def embed(self, request: EmbeddingRequest) -> EmbeddingResult:
        body = await self._post_json("/embeddings", embedding_body(request, self._model))
        return embeddings(body, [len(i) for i in request.inputs])

    async def count_tokens(self, request: GenerationRequest) -> int:
        """Exact where the upstream reports usage: it is asked for one token, greedy, and its
        `usage.prompt_tokens` read (the prompt with its chat template applied, as it will run) —
        at the cost of one prompt evaluation there. No standard OpenAI endpoint counts tokens
        without generating. Where the upstream reports no usage: an estimate from the text."""
        body = await self._post_json(generation_path(request), count_body(request, self._model))
        usage = body.get("usage")
        if isinstance(usage, Mapping) and usage.get("prompt_tokens"):
            return usage_of(usage).prompt_tokens
        return estimate_prompt_tokens(request)

    # -- generation ------------------------------------------------------------------

    async def _generate(self, request: GenerationRequest) -> AsyncGenerator[EngineEvent, None]:
        if request.adapters is not None:
            raise Unsupported(
                f"The model '{self.config.id}' is served upstream; 'lora' is not passed on.", param="lora"
            )
        try:
            stream = await self._open(generation_path(request), generation_body(request, self._model), request)
        except _NotFound:
            chat = chat_from_completion(request) if isinstance(request, CompletionRequest) else None
            if chat is None:
                raise BadGateway("The upstream server does not serve this model or endpoint.") from None
            stream = await self._open("/chat/completions", chat_body(chat, self._model), chat)
        async with contextlib.aclosing(stream):
            async for batch in stream:
                for event in batch:
                    yield event

    async def _open(
        self, path: str, body: dict[str, Any], request: GenerationRequest
    ) -> AsyncGenerator[list[EngineEvent], None]:
        """The stream from the first replica that produces a first event, with that event's batch
        ready; replicas that fail before it are marked and skipped."""
        last: LLMError = Unavailable("The upstream server cannot be reached; retry shortly.")
        for replica in self.replicas.attempts():
            stream = self._attempt(replica, path, body, request)
            try:
                with anyio.fail_after(self.config.first_byte_timeout):
                    first = await anext(stream)
            except _Retry as retry:
                last = retry.error
                if retry.unhealthy:
                    self.replicas.failed(replica)
                continue
            except TimeoutError:
                await stream.aclose()
                last = GatewayTimeout("The upstream server did not answer in time.")
                self.replicas.failed(replica)
                continue
            except StopAsyncIteration:
                raise BadGateway("The upstream server sent no answer.") from None
            except BaseException:
                await stream.aclose()
                raise
            return prepend(first, stream)
        raise last

    async def _attempt(
        self, replica: Replica, path: str, body: dict[str, Any], request: GenerationRequest
    ) -> AsyncGenerator[list[EngineEvent], None]:
        """One replica's stream as batches of events (one batch per chunk that made any). Failures
        before the first batch raise `_Retry`; after it, core errors."""
        assert self._client is not None, "the engine is not loaded"
        self.replicas.acquire(replica)
        started = False
        try:
            prompt = await self._sizer.size(self._client, replica.url, self._auth[replica.url], request)
            call, url = upstream_call(self._model, replica.url, path), replica.url + path
            async with call as trace, _stream(self._client, url, body, self._auth[replica.url], trace) as response:
                if response.status_code != 200:
                    raise await self._refusal(response, path)
                translator = translator_for(request, prompt)
                done = False
                lines = sse_lines(response.aiter_text())  # not aiter_lines: see sse_lines
                async with contextlib.aclosing(chunks(lines, secrets=self._secrets())) as read:
                    while not (done or translator.cut):  # cut: past a stop sequence, the rest is not wanted
                        chunk = await next_chunk(read, idle_timeout=self.config.idle_timeout if started else None)
                        done = chunk is None
                        if chunk is ENDED:
                            break  # the stream ended without [DONE]
                        events = translator.feed(chunk) if chunk is not None else []
                        if events:
                            started = True
                            yield events
                if not (done or translator.finished):  # cut off: llama-cpp-python's server cuts a stream
                    cut = BadGateway("The upstream server ended its answer early.")  # when another request comes
                    raise cut if started else _Retry(cut)
                started = True
                yield translator.finish()
        except httpx.TransportError as exc:
            error = _transport_error(exc, self._secrets())
            if not started:
                raise _Retry(error) from None
            raise error from None
        finally:
            self.replicas.release(replica)

    async def _refusal(self, response: httpx.Response, path: str) -> Exception:
        body = await response.aread()
        status = response.status_code
        if status in (404, 405) and path == "/completions":
            return _NotFound()
        error = error_from_response(status, response.headers, body, secrets=self._secrets(), now=time.time())
        log.warning("upstream replica answered %d for model %s", status, self.config.id)
        if retryable(status):
            return _Retry(error, unhealthy=status >= 500)
        return error

    # -- plain requests ----------------------------------------------------------------

    async def _post_json(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """One non-streamed request, retried on another replica where this one fails."""
        assert self._client is not None, "the engine is not loaded"
        last: LLMError = Unavailable("The upstream server cannot be reached; retry shortly.")
        for replica in self.replicas.attempts():
            self.replicas.acquire(replica)
            try:
                auth = self._auth[replica.url] or httpx.USE_CLIENT_DEFAULT
                response = await self._client.post(
                    replica.url + path, json=body, timeout=self._plain_timeout(), auth=auth
                )
            except httpx.TransportError as exc:
                last = _transport_error(exc, self._secrets())
                self.replicas.failed(replica)
                continue
            finally:
                self.replicas.release(replica)
            if response.status_code == 200:
                return decoded(response.text)
            status, secrets = response.status_code, self._secrets()
            error = error_from_response(status, response.headers, response.content, secrets=secrets, now=time.time())
            if not retryable(response.status_code):
                raise error
            last = error
            if response.status_code >= 500:
                self.replicas.failed(replica)
        raise last

    def _plain_timeout(self) -> httpx.Timeout:
        cfg = self.config
        return httpx.Timeout(cfg.first_byte_timeout, connect=cfg.connect_timeout)

    async def _probe(self, url: str) -> bool:
        """A replica is healthy when `GET /models` answers 200 (`/health` where that 404s), or
        takes the connection but is too busy to answer in time (single-slot servers such as
        llama-cpp-python's answer `/models` only between generations)."""
        assert self._client is not None
        timeout = httpx.Timeout(self.config.connect_timeout)
        auth = self._auth[url] or httpx.USE_CLIENT_DEFAULT
        try:
            response = await self._client.get(url + "/models", timeout=timeout, auth=auth)
            if response.status_code == 404:
                response = await self._client.get(url.rsplit("/v1", 1)[0] + "/health", timeout=timeout, auth=auth)
        except httpx.ReadTimeout:
            return True
        except httpx.HTTPError:
            return False
        return response.status_code == 200

    def _secrets(self) -> list[str]:
        """Strings an upstream message must never carry to a client: the key, the replica URLs."""
        key = self._key.get_secret_value() if self._key is not None else ""
        return [key, *self._given_urls, *(r.url for r in self.replicas.replicas)]


def _client(config: ModelConfig, key: SecretStr | None) -> httpx.AsyncClient:
    secret = key.get_secret_value() if key is not None else ""
    headers = {"authorization": f"Bearer {secret}"} if secret else {}
    # read=None: the first-byte and idle timeouts are enforced per event, above httpx.
    timeout = httpx.Timeout(connect=config.connect_timeout, read=None, write=config.idle_timeout, pool=None)
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=32)
    return httpx.AsyncClient(headers=headers, timeout=timeout, limits=limits, trust_env=False)


def _bare(url: str) -> str:
    """`url` without the `user:password@` part it may carry."""
    return str(httpx.URL(url).copy_with(userinfo=b"")).rstrip("/")


def _basic_auth(url: str) -> httpx.BasicAuth | None:
    """The credentials a URL carries, sent as Basic auth instead (the client has no auth of its own)."""
    parsed = httpx.URL(url)
    return httpx.BasicAuth(parsed.username, parsed.password) if parsed.username else None


@contextlib.asynccontextmanager
async def _stream(
    client: httpx.AsyncClient, url: str, body: dict[str, Any], auth: httpx.BasicAuth | None, trace: dict[str, str]
) -> AsyncIterator[httpx.Response]:
    request = client.build_request("POST", url, json=body, headers={"accept": "text/event-stream", **trace})
    response = await client.send(request, stream=True, auth=auth)
    try:
        yield response
    finally:
        await response.aclose()  # unread: the connection is dropped, and the upstream stops generating


def _transport_error(exc: httpx.TransportError, secrets: list[str]) -> LLMError:
    log.warning("upstream request failed: %s", scrub(type(exc).__name__ + ": " + str(exc), secrets))
    if isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout)):
        return Unavailable("The upstream server cannot be reached; retry shortly.")
    if isinstance(exc, httpx.TimeoutException):
        return GatewayTimeout("The upstream server did not answer in time.")
    return BadGateway("The upstream server closed the connection.")
