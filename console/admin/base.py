"""What every admin of the console shares: tenant scoping and no lookups on secrets.

Scoping rule: a superuser sees everything; a staff user sees, through every list,
change page, filter, autocomplete, action and URL, only the rows of the tenants they
are a member of (anything else is a 404). Membership is the permission: a staff member
of a tenant may view, add and change its jobs and endpoints and view its records (runs,
hints, planner sessions), which nobody edits. Only superusers delete or manage tenants;
what they delete takes its records with it (``DeletesForGood``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from django.contrib import admin
from django.contrib.admin.utils import quote
from django.db.models import QuerySet
from django.http import Http404, HttpRequest
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.text import capfirst

from console.admin.filters import (
    scope,
    user_tenant_ids,
)
from endpoints import operations
from endpoints.audit import Actor

# Fields holding secrets (header values, a URL's password, the HMAC secret). A lookup on
# one (``?headers__X-Partner__startswith=a``) would let a person read a masked value back
# one character at a time, so the changelist refuses it, however it is spelled.
SECRET_FIELDS = frozenset({"headers", "url", "hmac_secret"})


class NoSecretLookups(admin.ModelAdmin):
    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest | None = None) -> bool:
        if SECRET_FIELDS.intersection(lookup.split("__")):
            return False
        return super().lookup_allowed(lookup, value, request)


class DeletesForGood(admin.ModelAdmin):
    """Tenants, jobs, endpoints and channels are deleted the way the API deletes them
    (``operations.delete_for_good``): by the "delete selected" action too, which Django
    runs outside a transaction.

    Whoever may delete one may delete it with its history: the records' admins refuse
    deleting a single record, not the records of what goes. The confirmation lists the
    chosen objects and counts what goes with them per kind: Django's own lists every
    related row (every run) and asks each row's admin for permission."""

    def get_deleted_objects(
        self, objs: Sequence[Any] | QuerySet[Any], request: HttpRequest
    ) -> tuple[list[Any], dict[str, int], set[str], list[Any]]:
        chosen = [obj.pk for obj in objs]
        counts = operations.count_deleted(self.model._base_manager.filter(pk__in=chosen))
        listed = [self.deleted_object_link(obj) for obj in objs]
        totals = {str(model._meta.verbose_name_plural): n for model, n in counts.items()}
        return listed, totals, set(), []

    def deleted_object_link(self, obj: Any) -> SafeString:
        url = reverse(
            f"admin:{self.opts.app_label}_{self.opts.model_name}_change", args=[quote(obj.pk)]
        )
        return format_html('{}: <a href="{}">{}</a>', capfirst(self.opts.verbose_name), url, obj)

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        actor = Actor.person(request.user)
        operations.delete_for_good(type(obj).objects.filter(pk=obj.pk), actor=actor)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        operations.delete_for_good(queryset, actor=Actor.person(request.user))


class TenantScopedAdmin(NoSecretLookups):
    """Rows reachable only through the user's tenants; ``tenant_path`` leads to the tenant."""

    tenant_path: ClassVar[str]
    editable: ClassVar[bool] = False

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        return scope(super().get_queryset(request), request, self.tenant_path)

    def is_member(self, request: HttpRequest) -> bool:
        user: Any = request.user
        if user.is_superuser:
            return True
        return bool(user.is_active and user.is_staff and user_tenant_ids(request))

    def has_module_permission(self, request: HttpRequest) -> bool:
        return self.is_member(request)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.is_member(request)

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        return self.editable and self.is_member(request)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.editable and self.is_member(request)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        user: Any = request.user
        return self.editable and user.is_superuser

    def get_object(self, request: HttpRequest, object_id: str, from_field: Any = None) -> Any:
        """Another tenant's row does not exist for this user: 404, not a redirect."""
        obj = super().get_object(request, object_id, from_field)
        if obj is None:
            raise Http404(f"No {self.opts.verbose_name} with id {object_id!r} is yours to see.")
        return obj


class RecordAdmin(TenantScopedAdmin):
    """Records (runs, hints, sessions) are written by the system and never edited."""

    actions = None
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
