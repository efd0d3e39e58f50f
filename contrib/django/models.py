"""API keys kept in the project's database: only a hash of each key is stored."""

from __future__ import annotations

from datetime import datetime

from django.db import models

__all__ = ["APIKey"]


class APIKey(models.Model):
    name: models.CharField[str, str] = models.CharField(
        max_length=100, unique=True, help_text="Who or what uses the key."
    )
    hashed_key: models.CharField[str, str] = models.CharField(max_length=64, unique=True, editable=False)
    created: models.DateTimeField[datetime, datetime] = models.DateTimeField(auto_now_add=True)
    revoked: models.DateTimeField[datetime | None, datetime | None] = models.DateTimeField(
        null=True, blank=True, help_text="When set, the key no longer works."
    )
    expires: models.DateTimeField[datetime | None, datetime | None] = models.DateTimeField(
        null=True, blank=True, help_text="From then on, the key no longer works."
    )
    operator: models.BooleanField[bool, bool] = models.BooleanField(
        default=False, help_text="May also read /metrics, which shows every key's usage."
    )

    class Meta:
        verbose_name = "API key"
        ordering = ("name",)

    def __str__(self) -> str:
        return self.name
