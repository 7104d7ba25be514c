"""API keys in the admin: superusers create them (the key is shown once) and revoke them."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone

from api.models import KEY_PREFIX, ApiKey
from endpoints.wording import count_words


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = (
        "name",
        "tenant",
        "shown_prefix",
        "scope",
        "expires_at",
        "revoked_at",
        "last_used_at",
    )
    list_filter = ("scope", "tenant")
    search_fields = ("name", "prefix")
    fields = (
        "tenant",
        "name",
        "scope",
        "expires_at",
        "shown_prefix",
        "revoked_at",
        "last_used_at",
        "created_by",
        "created_at",
    )
    readonly_fields = ("shown_prefix", "revoked_at", "last_used_at", "created_by", "created_at")
    actions = ("revoke",)

    def has_module_permission(self, request: HttpRequest) -> bool:
        user: Any = request.user
        return bool(user.is_superuser)

    has_view_permission = has_add_permission = has_change_permission = (  # type: ignore[assignment]
        lambda self, request, obj=None: self.has_module_permission(request)
    )

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # revoked keys stay listed: who had access, and until when

    @admin.display(description="key")
    def shown_prefix(self, obj: ApiKey) -> str:
        return f"{KEY_PREFIX}{obj.prefix}_…" if obj.prefix else "(shown once, after saving)"

    def save_model(self, request: HttpRequest, obj: ApiKey, form: Any, change: bool) -> None:
        if change:
            super().save_model(request, obj, form, change)
            return
        raw = obj.issue()
        obj.created_by = request.user  # type: ignore[assignment]
        obj.save()
        messages.warning(
            request, f"The new key is {raw} — copy it now: it is not stored and never shown again."
        )

    @admin.action(description="Revoke the selected keys")
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiKey]) -> None:
        count = queryset.filter(revoked_at=None).update(revoked_at=timezone.now())
        self.message_user(
            request, f"{count_words(count, 'key')} revoked; they stop working at once."
        )
