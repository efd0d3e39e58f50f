"""The one `ASGI_LLM` Django setting, read when it is needed (so `override_settings` works).

ASGI_LLM = {
    "PREFIX": "/v1",                # where the OpenAI and Anthropic APIs answer
    "OLLAMA_AT_ROOT": True,         # also answer Ollama's /api/* at the site root
    "API_KEYS": ["..."],            # keys clients must send
    "MODELS": [{"path": "/models/qwen.gguf", "aliases": ["default"]}],
    "MAX_BODY_BYTES": 8388608,      # any other key is an asgi_llm `Settings` field
}
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured
from pydantic import ValidationError

from ...config import Settings

__all__ = ["DEFAULT_PREFIX", "InvalidSetting", "Options", "parse_options", "prefix_problem", "read_options"]

DEFAULT_PREFIX = "/v1"
_OWN_KEYS = ("PREFIX", "OLLAMA_AT_ROOT", "API_KEYS", "DATABASE_KEYS")


class InvalidSetting(ImproperlyConfigured):
    """`ASGI_LLM` is wrong; `check_id` is the system check that reports it."""

    def __init__(self, message: str, check_id: str = "asgi_llm.E001") -> None:
        super().__init__(f"ASGI_LLM: {message}")
        self.check_id = check_id


@dataclass(frozen=True)
class Options:
    settings: Settings
    prefix: str = DEFAULT_PREFIX
    ollama_at_root: bool = False
    api_keys: tuple[str, ...] = ()
    database_keys: bool = False  # also accept keys made with create_llm_key (the APIKey model)


def prefix_problem(prefix: object) -> str | None:
    """Why `prefix` can't be a mount point, or None when it can."""
    if not isinstance(prefix, str) or not prefix.startswith("/"):
        return f"PREFIX must be a path starting with '/', not {prefix!r}."
    if prefix.rstrip("/") == "":
        return "PREFIX must not be '/': Django answers the site root."
    if any(ch in prefix for ch in "?#{} \t"):
        return f"PREFIX must be a plain path, not {prefix!r}."
    return None


def parse_options(raw: Any) -> Options:
    """Validate the setting's value; raises `InvalidSetting` naming what is wrong."""
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping) or not all(isinstance(key, str) for key in raw):
        raise InvalidSetting("it must be a dict with string keys.")
    own = {key.upper(): value for key, value in raw.items() if key.upper() in _OWN_KEYS}
    rest = {key.lower(): value for key, value in raw.items() if key.upper() not in _OWN_KEYS}
    prefix = own.get("PREFIX", DEFAULT_PREFIX)
    problem = prefix_problem(prefix)
    if problem:
        raise InvalidSetting(problem, "asgi_llm.E002")
    keys = own.get("API_KEYS") or ()
    if isinstance(keys, str) or not all(isinstance(key, str) and key for key in keys):
        raise InvalidSetting("API_KEYS must be a list of non-empty strings.")
    try:
        settings = Settings.model_validate(rest)
    except ValidationError as exc:
        where = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'ASGI_LLM'}: {e['msg']}" for e in exc.errors())
        raise InvalidSetting(f"not valid asgi_llm Settings ({where}).") from None
    return Options(
        settings.with_keys(keys),
        prefix.rstrip("/"),
        bool(own.get("OLLAMA_AT_ROOT", False)),
        tuple(keys),
        bool(own.get("DATABASE_KEYS", False)),
    )


def read_options() -> Options:
    """The current `settings.ASGI_LLM` (absent means every default)."""
    return parse_options(getattr(django_settings, "ASGI_LLM", None))
