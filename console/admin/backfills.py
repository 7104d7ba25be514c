"""Backfills in the admin: the endpoints' "Backfill a past range…" action, whose
confirmation page lists the slots each would run before anything starts, and the list of
backfills with their progress and a cancel action. Thin over ``endpoints.backfill``."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import Q, QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.utils import timezone

from console.admin.base import TenantScopedAdmin
from console.admin.filters import user_tenant_ids
from console.admin.jobs import EndpointAdmin
from endpoints.backfill import (
    DEFAULT_RATE,
    BackfillPlan,
    backfill_progress,
    cancel_backfill,
    plan_backfill,
    progress_words,
    start_backfill,
)
from endpoints.backfill_models import Backfill
from endpoints.models import Endpoint
from endpoints.operations import OperationRefused

# The slots the confirmation page lists per endpoint (the counts cover them all).
LISTED = 200


class BackfillRangeForm(forms.Form):
    range_from = forms.DateTimeField(label="From (UTC)", help_text="e.g. 2026-03-01 02:00")
    range_to = forms.DateTimeField(label="To (UTC, excluded)", help_text="at or before now")
    rate = forms.CharField(initial=f"{DEFAULT_RATE:g}/s", help_text="runs a second, e.g. 5/s")


@admin.action(description="Backfill a past range… (lists the slots first)")
def backfill_range(
    modeladmin: EndpointAdmin, request: HttpRequest, queryset: QuerySet[Endpoint]
) -> TemplateResponse | None:
    """Three steps on one page: the range, then its slots for each endpoint (nothing
    written yet), then, confirmed, the backfills started."""
    endpoints = list(queryset.select_related("job__tenant", "slot").order_by("pk"))
    form = BackfillRangeForm(request.POST if "range_from" in request.POST else None)
    plans: list[BackfillPlan] = []
    problems: list[str] = []
    if form.is_bound and form.is_valid():
        now = timezone.now()
        span = {
            "start": form.cleaned_data["range_from"],
            "end": form.cleaned_data["range_to"],
            "rate": form.cleaned_data["rate"],
        }
        for endpoint in endpoints:
            try:
                plans.append(plan_backfill(endpoint=endpoint, **span, now=now))
            except OperationRefused as exc:
                problems.append(f"{endpoint.ref}: {exc}")
        if "confirm" in request.POST and not problems:
            for endpoint in endpoints:
                made = start_backfill(
                    endpoint=endpoint, **span, requested_by=f"user {request.user}", now=now
                )
                modeladmin.message_user(request, progress_words(backfill_progress(made)))
            return None
    context = {
        **modeladmin.admin_site.each_context(request),
        "title": "Backfill a past range",
        "opts": modeladmin.opts,
        "form": form,
        "endpoints": endpoints,
        "plans": [(plan, plan.slots[:LISTED], len(plan.slots) - LISTED) for plan in plans],
        "problems": problems,
        "action": "backfill_range",
        "can_confirm": bool(plans) and not problems,
    }
    return TemplateResponse(request, "admin/endpoints/backfill_confirm.html", context)


EndpointAdmin.actions = (*EndpointAdmin.actions, backfill_range)  # type: ignore[assignment]


@admin.register(Backfill)
class BackfillAdmin(TenantScopedAdmin):
    tenant_path = "endpoint__job__tenant"
    list_display = ("pk", "what", "range_from", "range_to", "status", "progress", "requested_by")
    list_filter = ("status",)
    actions = ("cancel",)
    readonly_fields = list_display

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        ids = user_tenant_ids(request)
        backfills = Backfill.objects.select_related("endpoint__job", "job")
        if ids is None:
            return backfills
        return backfills.filter(Q(endpoint__job__tenant__in=ids) | Q(job__tenant__in=ids))

    @admin.display(description="endpoint or job")
    def what(self, obj: Backfill) -> str:
        return obj.endpoint.ref if obj.endpoint is not None else f"job {obj.job}"

    @admin.display(description="progress")
    def progress(self, obj: Backfill) -> str:
        return progress_words(backfill_progress(obj))

    @admin.action(description="Cancel the selected backfills")
    def cancel(self, request: HttpRequest, queryset: QuerySet[Backfill]) -> None:
        for backfill in queryset:
            try:
                cancel_backfill(backfill)
                self.message_user(request, f"Backfill {backfill.pk} cancelled.")
            except OperationRefused as exc:
                self.message_user(request, str(exc), messages.WARNING)
