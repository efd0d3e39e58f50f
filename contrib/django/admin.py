"""API keys in the admin: list, revoke, delete. New keys come from `manage.py create_llm_key`,
which shows the key once."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone

from .models import APIKey

__all__ = ["APIKeyAdmin"]

if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin[APIKey]
else:
    _ModelAdmin = admin.ModelAdmin  # not subscriptable at run time


@admin.register(APIKey)
class APIKeyAdmin(_ModelAdmin):
    list_display = ("name", "operator", "created", "expires", "revoked")
    list_filter = ("revoked", "operator")
    search_fields = ("name",)
    readonly_fields = ("name", "created")
    actions = ("revoke",)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # a key must be shown to its owner once: `manage.py create_llm_key NAME`

    @admin.action(description="Revoke the selected keys")
    def revoke(self, request: HttpRequest, queryset: QuerySet[APIKey]) -> None:
        count = queryset.filter(revoked__isnull=True).update(revoked=timezone.now())
        self.message_user(request, f"Revoked {count} key(s).")
