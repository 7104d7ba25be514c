"""Health: the scheduler's status, an endpoint's health over 1 h / 24 h / 7 d, and the
dashboard's numbers, all counted over the caller's tenants only."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count, Q
from django.db.models.functions import TruncHour
from django.utils import timezone
from ninja import Router

from api.auth import Principal
from api.operations import operation
from api.routers.endpoints import scoped_endpoint
from api.schemas import (
    Dashboard,
    EndpointHealth,
    FailingEndpoint,
    HourStats,
    SchedulerHealth,
    WindowHealth,
)
from endpoints.choices import FAILED_STATUSES
from endpoints.health import HealthReport, percentile, scoped_health
from endpoints.models import Endpoint, Run, RunStatus

router = Router(tags=["health"])

WINDOWS = {"1h": timedelta(hours=1), "24h": timedelta(hours=24), "7d": timedelta(days=7)}
# Percentiles from the latest runs of a window, as the dashboard's lateness does.
DURATION_SAMPLE = 10_000
SERIES_HOURS = 24
TOP_FAILING = 10


def _tenant_ids(principal: Principal) -> list[int] | None:
    return None if principal.tenant_ids is None else list(principal.tenant_ids)


@operation(router, "get", "/health/scheduler", name="scheduler_status", response=SchedulerHealth)
def scheduler_status(principal: Principal) -> HealthReport:
    """Is the scheduler alive (last tick), its backlog, runs in flight, lateness, failures."""
    return scoped_health(tenant_ids=_tenant_ids(principal), now=timezone.now())


@operation(
    router,
    "get",
    "/endpoints/{endpoint_id}/health",
    name="endpoint_health",
    response=EndpointHealth,
)
def endpoint_health(principal: Principal, endpoint_id: int) -> EndpointHealth:
    """Success rate and p50/p95 duration over 1 h, 24 h and 7 d; the failure streak."""
    endpoint = scoped_endpoint(principal, endpoint_id)
    now = timezone.now()
    runs = Run.objects.filter(endpoint_id=endpoint.pk, started_at__lte=now)
    last_failed = runs.exclude(error="").order_by("-started_at").values_list("error", flat=True)
    return EndpointHealth(
        endpoint_id=endpoint.pk,
        failures_in_a_row=endpoint.failure_count,
        last_error=last_failed.first() or "",
        windows=[_window(runs, label, now - span) for label, span in WINDOWS.items()],
    )


def _window(runs: Any, label: str, since: datetime) -> WindowHealth:
    recent = runs.filter(started_at__gte=since)
    counts = recent.exclude(status=RunStatus.RUNNING).aggregate(
        total=Count("pk"), ok=Count("pk", filter=Q(status=RunStatus.SUCCESS))
    )
    durations = sorted(
        float(ms)
        for ms in recent.filter(duration_ms__isnull=False)
        .order_by("-started_at")
        .values_list("duration_ms", flat=True)[:DURATION_SAMPLE]
    )
    return WindowHealth(
        window=label,  # type: ignore[arg-type]
        runs=counts["total"],
        success_rate=round(counts["ok"] / counts["total"], 4) if counts["total"] else None,
        p50_duration_ms=percentile(durations, 0.50),
        p95_duration_ms=percentile(durations, 0.95),
    )


@operation(router, "get", "/dashboard", name="dashboard_stats", response=Dashboard)
def dashboard_stats(principal: Principal) -> Dashboard:
    """The status page in numbers: endpoints (failing, paused), runs and failures in the
    last 24 h, hour by hour (series), which rules scheduled them (source mix), and the
    endpoints that failed most (top failing)."""
    now = timezone.now()
    endpoints = principal.scope(Endpoint.objects.live(), "job__tenant")
    runs = principal.scope(Run.objects.all(), "endpoint__job__tenant").filter(
        started_at__gte=now - timedelta(hours=24), started_at__lte=now
    )
    counts = endpoints.aggregate(
        total=Count("pk"),
        failing=Count("pk", filter=Q(failure_count__gt=0)),
        paused=Count("pk", filter=Q(paused_until__gt=now)),
    )
    run_counts = runs.aggregate(
        total=Count("pk"),
        failed=Count("pk", filter=Q(status__in=FAILED_STATUSES)),
    )
    return Dashboard(
        endpoints=counts["total"],
        failing=counts["failing"],
        paused=counts["paused"],
        runs_last_24h=run_counts["total"],
        failures_last_24h=run_counts["failed"],
        series=_series(runs, now),
        source_mix=_source_mix(runs),
        top_failing=_top_failing(runs),
    )


def _series(runs: Any, now: datetime) -> list[HourStats]:
    """24 hourly buckets, oldest first, empty hours included (a chart needs no gaps)."""
    rows = (
        runs.annotate(hour=TruncHour("started_at"))
        .values("hour")
        .annotate(total=Count("pk"), failed=Count("pk", filter=Q(status__in=FAILED_STATUSES)))
    )
    counted = {row["hour"]: row for row in rows}
    first = now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=SERIES_HOURS - 1)
    series = []
    for step in range(SERIES_HOURS):
        hour = first + timedelta(hours=step)
        row = counted.get(hour, {})
        series.append(HourStats(hour=hour, runs=row.get("total", 0), failures=row.get("failed", 0)))
    return series


def _source_mix(runs: Any) -> dict[str, int]:
    rows = runs.values("source").annotate(total=Count("pk")).order_by("-total", "source")
    return {row["source"] or "manual": row["total"] for row in rows}


def _top_failing(runs: Any) -> list[FailingEndpoint]:
    rows = list(
        runs.filter(status__in=FAILED_STATUSES)
        .values("endpoint_id")
        .annotate(failures=Count("pk"))
        .order_by("-failures", "endpoint_id")[:TOP_FAILING]
    )
    endpoints = Endpoint.objects.select_related("job").in_bulk([r["endpoint_id"] for r in rows])
    shown = []
    for row in rows:
        endpoint = endpoints.get(row["endpoint_id"])
        if endpoint is None:  # deleted meanwhile
            continue
        shown.append(
            FailingEndpoint(
                endpoint_id=endpoint.pk,
                ref=endpoint.ref,
                failures_last_24h=row["failures"],
                failures_in_a_row=endpoint.failure_count,
            )
        )
    return shown
