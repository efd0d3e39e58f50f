"""API-key authentication: every route is protected unless named public.

Keys arrive as `Authorization: Bearer KEY` (OpenAI, Ollama clients) or `x-api-key: KEY`
(Anthropic clients). A missing or unknown key is a 401, a key used outside its protocol or
model allow-list a 403, each in the calling protocol's error envelope. The key's `KeyInfo` goes
into the request's `RequestContext` for the layers inside, and its *name* (never the key) into
`scope["state"]["asgi_llm.key"]` for the host's own code.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from typing import Any

from asgi_llm.core import Forbidden, InternalError, LLMError, Unauthorized
from asgi_llm.core.policy import KeyInfo
from asgi_llm.http.asgi import ASGIApp, Receive, Scope, Send, header
from asgi_llm.http.body import peek_json
from asgi_llm.http.context import Classify, RequestInfo, identify, request_context, request_info, send_error

from .keys import Verifier

__all__ = ["AuthMiddleware", "presented_key"]

log = logging.getLogger("asgi_llm.auth")

_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
_MISSING = "Missing API key: send it as 'Authorization: Bearer KEY' or 'x-api-key: KEY'."
_INVALID = "Invalid API key."


def presented_key(scope: Scope) -> str | None:
    """The key from `Authorization: Bearer` or, failing that, `x-api-key`."""
    authorization = header(scope, b"authorization")
    if authorization is not None:
        scheme, _, credentials = authorization.strip().partition(" ")
        if scheme.lower() == "bearer" and credentials.strip():
            return credentials.strip()
    api_key = (header(scope, b"x-api-key") or "").strip()
    return api_key or None


class AuthMiddleware:
    """`AuthMiddleware(app, verify=KeyStore(...))`; `public` are paths below the mount that
    need no key; `classify` tells a layer outside an `LLMApp` its protocol (`llm.classify`)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        verify: Verifier,
        public: Collection[str] = ("/health",),
        classify: Classify | None = None,
        max_body_bytes: int = 8 * 1024 * 1024,
    ) -> None:
        self.app = app
        self._verify = verify
        self.public = frozenset("/" + p.strip("/") for p in public)  # read by the app's OpenAPI document
        self._classify = classify
        self._limit = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        info = request_info(scope, self._classify)
        if info.path in self.public:
            await self.app(scope, receive, send)
            return
        context = request_context(scope)
        identity: KeyInfo | None
        if context.in_process is not None:  # host code in this process named its identity (`LLMApp.client`)
            identity = context.key
        else:
            try:
                identity = await self._identify(scope, info)
            except LLMError as error:
                await _refuse(scope, send, info, error)
                return
            identify(scope, identity)
        if (
            identity is not None
            and identity.models is not None
            and scope["type"] == "http"
            and scope["method"] in _BODY_METHODS
        ):
            try:
                body, receive = await peek_json(scope, receive, self._limit)
                _check_model(identity, info, body)
            except LLMError as error:  # the body's own refusal (too large, not JSON) or the key's
                await _refuse(scope, send, info, error)
                return
        await self.app(scope, receive, send)

    async def _identify(self, scope: Scope, info: RequestInfo) -> KeyInfo:
        key = presented_key(scope)
        if key is None:
            raise Unauthorized(_MISSING)
        try:
            identity = await self._verify(key)
        except LLMError:
            raise
        except Exception as exc:  # noqa: BLE001 (the host's verifier; its message might hold the key)
            log.error("the API key verifier raised %s", type(exc).__name__)
            raise InternalError("The server could not check the API key.") from None
        if identity is None:
            raise Unauthorized(_INVALID)
        if identity.protocols is not None and info.protocol not in identity.protocols:
            raise Forbidden(f"This API key may not use the {info.protocol} API.")
        return identity


def _check_model(identity: KeyInfo, info: RequestInfo, body: dict[str, Any] | None) -> None:
    requested = body.get("model", body.get("name")) if body is not None else None
    if not isinstance(requested, str):
        return  # no model named: the app answers (or refuses) it as usual
    if not identity.may_use(requested, info.resolve_model):
        raise Forbidden(f"This API key may not use the model '{requested[:200]}'.", param="model")


async def _refuse(scope: Scope, send: Send, info: RequestInfo, error: LLMError) -> None:
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 1008})
    else:
        await send_error(scope, send, info, error)
