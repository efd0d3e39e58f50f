"""Request ids in log lines, and JSON log lines for operators who want one object per line.

While `LLMApp` serves a request, its id (`x-request-id`) is the context's current request id.
`RequestIdFilter`, which `LLMApp` puts on the loggers it owns (`asgi_llm` and `asgi_llm.*`,
never the host's), gives each of their records a `request_id` attribute and ends the message
with `[request …]`, so the id shows in the host's own format. `JSONFormatter` is for the
host's logging configuration (we never install it when mounted); `asgi-llm serve` installs it
with `log_format = "json"`. `RedactCredentials` keeps keys sent in a query string
(`?api_key=…`) out of `asgi-llm serve`'s access lines, text and JSON alike.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime as dt
import json
import logging
import urllib.parse
from collections.abc import Iterator
from typing import Any

__all__ = [
    "CREDENTIAL_PARAMETERS",
    "OWN_LOGGERS",
    "JSONFormatter",
    "RedactCredentials",
    "RequestIdFilter",
    "current_request_id",
    "redact_access_log",
    "redact_query",
    "serve_json_log_config",
    "serving_request",
    "tag_own_loggers",
]

_CURRENT: contextvars.ContextVar[str | None] = contextvars.ContextVar("asgi_llm_request_id", default=None)

OWN_LOGGERS = (
    "asgi_llm",
    "asgi_llm.auth",
    "asgi_llm.background",
    "asgi_llm.endpoint",
    "asgi_llm.engine",
    "asgi_llm.inference",
    "asgi_llm.llama_cpp",
    "asgi_llm.pool",
    "asgi_llm.reload",
    "asgi_llm.shared",
    "asgi_llm.upstream",
    "asgi_llm.usage",
)
"""The loggers this package logs on, every one (tests/test_static/test_loggers.py reads the
source for them). A filter on a logger sees only its own records (not its children's), so each
gets one."""


def current_request_id() -> str | None:
    """The id of the request being served in this context, if any."""
    return _CURRENT.get()


@contextlib.contextmanager
def serving_request(request_id: str) -> Iterator[None]:
    """`request_id` is the current one inside the block (per task: concurrent requests each
    see their own)."""
    token = _CURRENT.set(request_id)
    try:
        yield
    finally:
        _CURRENT.reset(token)


class RequestIdFilter(logging.Filter):
    """Adds `record.request_id` (None outside a request); a record logged while a request is
    served ends with `[request ID]`, whatever the format the host's handlers use."""

    def filter(self, record: logging.LogRecord) -> bool:
        found = _CURRENT.get()
        if getattr(record, "request_id", None) is None:
            record.request_id = found
            if found is not None:
                record.msg = f"{record.msg} [request {found}]"
        return True


def tag_own_loggers() -> None:
    """Put one `RequestIdFilter` on each of our own loggers (idempotent); nothing else changes:
    no handler, level or propagation of any logger, ours or the host's."""
    for name in OWN_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, RequestIdFilter) for f in logger.filters):
            logger.addFilter(RequestIdFilter())


class JSONFormatter(logging.Formatter):
    """One JSON object per line: `time` (UTC, ISO 8601), `level`, `logger`, `message`,
    `request_id` (null outside a request), and `exception` when there is one.

    For a host's `logging.config.dictConfig`: `{"()": "asgi_llm.logs.JSONFormatter"}`. Lines
    logged by any logger while `asgi_llm` serves a request (uvicorn's access line included)
    carry that request's id.
    """

    def format(self, record: logging.LogRecord) -> str:
        request_id = getattr(record, "request_id", None) or _CURRENT.get()
        message = record.getMessage()
        if request_id is not None:
            message = message.removesuffix(f" [request {request_id}]")
        line: dict[str, Any] = {
            "time": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": message,
            "request_id": request_id,
        }
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exception"] = record.exc_text
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return json.dumps(line, ensure_ascii=False, default=str)


CREDENTIAL_PARAMETERS = frozenset(
    {"api_key", "api-key", "apikey", "x-api-key", "key", "token", "access_token", "auth", "password", "secret", "sig"}
    | {"authorization", "bearer", "api_token", "auth_token", "id_token", "refresh_token", "client_secret", "jwt"}
)
"""Query parameters whose values never reach a log line (compared case-insensitively, decoded)."""

_BEARER = "bearer "
"""A value that starts as an `Authorization: Bearer` header does is a credential, whatever its name."""


def redact_query(target: str) -> str:
    """`target` (a path with its query string) with the value of each credential-like parameter
    replaced by `[redacted]`; everything else is left as it was sent."""
    path, mark, query = target.partition("?")
    if not mark:
        return target
    parts = []
    for part in query.split("&"):
        name, equals, value = part.partition("=")
        if equals and _credential(urllib.parse.unquote_plus(name), urllib.parse.unquote_plus(value)):
            part = f"{name}=[redacted]"
        parts.append(part)
    return f"{path}?{'&'.join(parts)}"


def _credential(name: str, value: str) -> bool:
    return name.lower() in CREDENTIAL_PARAMETERS or value.lstrip().lower().startswith(_BEARER)


class RedactCredentials(logging.Filter):
    """On uvicorn's access logger (`asgi-llm serve` puts it there): a key sent as `?api_key=…`
    is refused with a 401, but its access line would still carry it. Every string argument of
    the record that holds a query string is redacted, before any formatter reads it."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(redact_query(a) if isinstance(a, str) and "?" in a else a for a in record.args)
        return True


def redact_access_log() -> None:
    """Put one `RedactCredentials` on uvicorn's access logger (idempotent). For the process
    `asgi-llm serve` owns; uvicorn's own logging configuration keeps a logger's filters."""
    access = logging.getLogger("uvicorn.access")
    if not any(isinstance(f, RedactCredentials) for f in access.filters):
        access.addFilter(RedactCredentials())


def serve_json_log_config(level: str) -> dict[str, Any]:
    """The logging configuration `asgi-llm serve --log-json` installs in the process it owns:
    every line — ours, uvicorn's server lines (stderr) and access lines (stdout) — one JSON
    object."""
    upper = level.upper()
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": JSONFormatter}},
        "handlers": {
            "default": {"class": "logging.StreamHandler", "formatter": "json", "stream": "ext://sys.stderr"},
            "access": {"class": "logging.StreamHandler", "formatter": "json", "stream": "ext://sys.stdout"},
        },
        "root": {"handlers": ["default"], "level": upper},
        "loggers": {
            "uvicorn": {"handlers": [], "level": upper, "propagate": True},
            "uvicorn.error": {"level": upper},
            "uvicorn.access": {"handlers": ["access"], "level": upper, "propagate": False},
        },
    }
