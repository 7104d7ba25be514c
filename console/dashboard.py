"""What the admin index shows: scheduler health, its loops, failing endpoints, planner usage.

A superuser sees the whole scheduler through ``health.scheduler_health``, and what each
loop did in its last pass. A staff member sees the scheduler's liveness (last tick and
each loop's last pass: it is the same scheduler for everyone) and numbers counted over
their own tenants' endpoints only, so no other tenant's volume shows through (a loop's
counts are the whole fleet's, so they are left out).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, TypedDict

from django.apps import apps
from django.conf import settings
from django.db.models import Count, OuterRef, Subquery, Sum

from endpoints.health import HealthReport, LoopBeat, loop_beats, scoped_health
from endpoints.models import Endpoint, Run, Tenant
from planner.models import AnalysisSession

FAILING_SHOWN = 10


class DashboardPage(TypedDict):
    health: HealthReport
    tick_stale: bool
    loops: list[LoopBeat]
    failing: list[Endpoint]
    planner: list[dict[str, Any]]
    channels_failing: list[Any] | None
    scoped: bool


def build_dashboard(*, tenant_ids: list[int] | None, now: datetime) -> DashboardPage:
    """The index page's numbers; ``tenant_ids`` None means every tenant (superuser)."""
    health = scoped_health(tenant_ids=tenant_ids, now=now)
    return {
        "health": health,
        "tick_stale": _tick_stale(health),
        "loops": _loops(tenant_ids, now),
        "failing": _failing_endpoints(tenant_ids),
        "planner": _planner_usage(tenant_ids, now),
        "channels_failing": _channels_failing(tenant_ids),
        "scoped": tenant_ids is not None,
    }


def _tick_stale(health: HealthReport) -> bool:
    age = health.get("last_tick_age_seconds")
    return age is None or age > settings.CRONICORN_READY_MAX_TICK_AGE_SECONDS


def _loops(tenant_ids: list[int] | None, now: datetime) -> list[LoopBeat]:
    loops = loop_beats(now=now)
    if tenant_ids is None:
        return loops
    return [{**loop, "info": {}, "did": ""} for loop in loops]


def _failing_endpoints(tenant_ids: list[int] | None) -> list[Endpoint]:
    endpoints = Endpoint.objects.live().filter(failure_count__gt=0)
    if tenant_ids is not None:
        endpoints = endpoints.filter(job__tenant__in=tenant_ids)
    last = Run.objects.filter(endpoint=OuterRef("pk")).order_by("-started_at")
    return list(
        endpoints.select_related("job")
        .annotate(
            last_error=Subquery(last.values("error")[:1]),
            last_status=Subquery(last.values("status")[:1]),
        )
        .order_by("-failure_count", "job__name", "name")[:FAILING_SHOWN]
    )


def _channels_failing(tenant_ids: list[int] | None) -> list[Any] | None:
    """Alert channels marked failing; None when the notifications app is not installed."""
    if not apps.is_installed("notifications"):
        return None
    channels = apps.get_model("notifications", "Channel").objects.filter(
        failing_since__isnull=False
    )
    if tenant_ids is not None:
        channels = channels.filter(tenant__in=tenant_ids)
    return list(channels.select_related("tenant").order_by("failing_since")[:FAILING_SHOWN])


def _planner_usage(tenant_ids: list[int] | None, now: datetime) -> list[dict[str, Any]]:
    """Sessions and tokens this calendar month per tenant, against the monthly budget."""
    tenants = Tenant.objects.order_by("name")
    if tenant_ids is not None:
        tenants = tenants.filter(pk__in=tenant_ids)
    usage = {
        row["endpoint__job__tenant"]: row
        for row in AnalysisSession.objects.this_month(now)
        .filter(endpoint__job__tenant__in=tenants.values("pk"))
        .values("endpoint__job__tenant")
        .annotate(sessions=Count("pk"), tokens=Sum("total_tokens"))
        .order_by()
    }
    rows = []
    for tenant in tenants:
        used = usage.get(tenant.pk, {})
        tokens = used.get("tokens") or 0
        budget = tenant.monthly_token_budget
        rows.append(
            {
                "tenant": tenant,
                "sessions": used.get("sessions", 0),
                "tokens": tokens,
                "tokens_shown": f"{tokens:,}",
                "budget": budget,
                "budget_shown": f"{budget:,}",
                "percent": round(100 * tokens / budget) if budget else None,
                "over": bool(budget) and tokens >= budget,
            }
        )
    return rows
