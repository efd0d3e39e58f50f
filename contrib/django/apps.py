"""The Django app: add `"asgi_llm.contrib.django"` to `INSTALLED_APPS` for checks and the key store."""

from __future__ import annotations

from django.apps import AppConfig

__all__ = ["LLMAppConfig"]


class LLMAppConfig(AppConfig):
    name = "asgi_llm.contrib.django"
    label = "asgi_llm"
    verbose_name = "LLM API"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import checks  # registers the system checks

        del checks
