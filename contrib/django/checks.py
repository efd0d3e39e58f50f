"""System checks for `settings.ASGI_LLM` (`manage.py check`, and before `migrate` and the test runner)."""

from __future__ import annotations

import os
from typing import Any

from django.conf import settings as django_settings
from django.core.checks import CheckMessage, Error, Warning, register

from ...config import DefaultModelMissing, ModelConfig, default_model_path
from .conf import InvalidSetting, Options, parse_options

__all__ = ["check_settings"]


@register("asgi_llm")
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    try:
        options = parse_options(getattr(django_settings, "ASGI_LLM", None))
    except InvalidSetting as exc:
        return [Error(str(exc), obj="ASGI_LLM", id=exc.check_id)]
    messages: list[CheckMessage] = [
        Error(f"Model {model.id!r}: {problem}", obj="ASGI_LLM", id="asgi_llm.E003")
        for model in options.settings.models
        if (problem := _file_problem(model))
    ]
    if not _asks_for_keys(options) and not django_settings.DEBUG:
        hint = 'Set ASGI_LLM["API_KEYS"]; anyone who can reach the server can use the models.'
        messages.append(
            Warning("The LLM API has no API keys while DEBUG is off.", hint=hint, obj="ASGI_LLM", id="asgi_llm.W001")
        )
    return messages


def _asks_for_keys(options: Options) -> bool:
    """Whether every request needs a key: keys in the setting, a keys file or database of
    asgi_llm's own, or the APIKey table (`DATABASE_KEYS`, though it may be empty yet)."""
    return options.database_keys or options.settings.auth_enabled


def _file_problem(model: ModelConfig) -> str | None:
    if model.path is None:
        try:
            default_model_path()
        except DefaultModelMissing as exc:
            return str(exc)
        return None
    if not os.path.isfile(model.path):
        return f"there is no GGUF file at {model.path}."
    return None
