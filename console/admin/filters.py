"""Tenant scoping, list filters and a bounded paginator for the admin.

Every choice a filter offers comes from the signed-in user's tenants, so a filter
sidebar never names another tenant's jobs or endpoints. Filters over runs are bounded
and indexed: no ``SELECT DISTINCT`` or ``COUNT(*)`` over the whole runs table.
"""

from __future__ import annotations

from datetime import timedelta
from functools import cached_property
from typing import Any

from django.contrib import admin
from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone

from endpoints.models import ENDPOINT_STATUSES, Endpoint, Job, Source, Tenant

ENDPOINT_CHOICES_CAP = 100


def user_tenant_ids(request: HttpRequest) -> list[int] | None:
    """The ids of the tenants the user belongs to; None means every tenant (superuser).

    Cached on the request: a changelist asks for it from several places.
    """
    user: Any = request.user
    if user.is_superuser:
        return None
    cached = getattr(request, "_cronicorn_tenant_ids", None)
    if cached is None:
        cached = list(Tenant.objects.filter(members=user).values_list("pk", flat=True))
        request._cronicorn_tenant_ids = cached  # type: ignore[attr-defined]
    return cached


def scope(queryset: QuerySet[Any], request: HttpRequest, tenant_path: str) -> QuerySet[Any]:
    ids = user_tenant_ids(request)
    return queryset if ids is None else queryset.filter(**{f"{tenant_path}__in": ids})


class ScopedRelatedFilter(admin.RelatedFieldListFilter):
    def has_output(self) -> bool:
        # Django skips (and so never applies) a filter with a single choice; a chosen value
        # must still filter, e.g. a link to one job's runs.
        return True


class TenantFilter(ScopedRelatedFilter):
    """A tenant filter that lists only the user's tenants."""

    def field_choices(self, field: Any, request: HttpRequest, model_admin: Any) -> list[Any]:
        ids = user_tenant_ids(request)
        limit = {} if ids is None else {"pk__in": ids}
        return list(field.get_choices(include_blank=False, limit_choices_to=limit))


class JobFilter(ScopedRelatedFilter):
    """A job filter that lists only the user's tenants' jobs."""

    def field_choices(self, field: Any, request: HttpRequest, model_admin: Any) -> list[Any]:
        ids = user_tenant_ids(request)
        limit = {} if ids is None else {"tenant__in": ids}
        return [
            (job.pk, f"{job.name} ({job.tenant.name})")
            for job in Job.objects.filter(**limit).select_related("tenant")
        ]


class EndpointFilter(admin.SimpleListFilter):
    """The user's endpoints, capped (plus the chosen one) so 10 000 never fill the sidebar."""

    title = "endpoint"
    parameter_name = "endpoint"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        endpoints = scope(Endpoint.objects.live(), request, "job__tenant").select_related("job")
        chosen = self.value()
        picked = list(endpoints.order_by("job__name", "name")[:ENDPOINT_CHOICES_CAP])
        if chosen and chosen.isdecimal() and all(str(e.pk) != chosen for e in picked):
            picked += list(scope(Endpoint.objects.all(), request, "job__tenant").filter(pk=chosen))
        return [(str(e.pk), f"{e.job.name}/{e.name}") for e in picked]

    def has_output(self) -> bool:
        # A chosen endpoint must filter even when the user has none left to offer.
        return bool(self.lookup_choices or self.value())

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if not value:
            return queryset
        if not value.isdecimal():
            return queryset.none()
        return queryset.filter(endpoint_id=int(value))


class EndpointStatusListFilter(admin.SimpleListFilter):
    title = "status"
    parameter_name = "status"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(status, status.capitalize()) for status in ENDPOINT_STATUSES]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return queryset.in_status(self.value() or "", now=timezone.now())  # type: ignore[attr-defined]


class SourceFilter(admin.SimpleListFilter):
    """Run source from the known values (no DISTINCT over the runs table)."""

    title = "source"
    parameter_name = "source"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(value, str(label)) for value, label in Source.choices]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        return queryset.filter(source=value) if value else queryset


class StartedFilter(admin.SimpleListFilter):
    """Recent windows over the indexed ``started_at`` (no date hierarchy over millions)."""

    title = "started"
    parameter_name = "started"
    windows = {
        "1h": ("In the last hour", timedelta(hours=1)),
        "24h": ("In the last 24 hours", timedelta(days=1)),
        "7d": ("In the last 7 days", timedelta(days=7)),
        "30d": ("In the last 30 days", timedelta(days=30)),
    }

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(key, label) for key, (label, _) in self.windows.items()]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        window = self.windows.get(self.value() or "")
        if window is None:
            return queryset
        return queryset.filter(started_at__gte=timezone.now() - window[1])


class BoundedCountPaginator(Paginator):
    """Counts at most ``cap`` rows, so a page of a million-row table never scans them all.

    Past the cap the list says "more than N" and offers the first N rows' pages; filters
    are the way to the rest (deep OFFSETs are slow anyway).
    """

    cap = 10_000

    @cached_property
    def _bounded_count(self) -> int:
        object_list: Any = self.object_list
        return int(object_list.order_by()[: self.cap + 1].count())

    @cached_property
    def count(self) -> int:
        return min(self._bounded_count, self.cap)

    @property
    def capped(self) -> bool:
        return self._bounded_count > self.cap
