"""``manage.py endpoints``: list endpoints with their schedule and state."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.db.models import OuterRef, Q, QuerySet, Subquery
from django.utils import timezone

from endpoints.management.commands._shared import iso, next_run_words, table, to_json
from endpoints.models import Endpoint, JobStatus, Run
from endpoints.schedules import describe_schedule, format_interval
from endpoints.secrets import redact_url

STATES = ("live", "active", "paused", "failing", "hinted", "archived", "all")


class Command(BaseCommand):
    help = (
        "List endpoints: job/name, schedule in words, next run and what set it, last run "
        "status, failure streak, active hint and pause. Archived endpoints are left out "
        "unless --status archived or all."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--job", metavar="NAME", help="Only endpoints of this job.")
        parser.add_argument("--tenant", metavar="NAME", help="Only endpoints of this tenant.")
        parser.add_argument(
            "--status",
            choices=STATES,
            default="live",
            help="live (default: not archived), active (live, not paused), paused (itself "
            "or its job), failing (failure streak above 0), hinted (a fresh hint), "
            "archived, or all.",
        )
        parser.add_argument("--json", action="store_true", help="A JSON list, for scripts.")

    def handle(self, *args: Any, **options: Any) -> None:
        now = timezone.now()
        endpoints = list(select(now, options["status"], options["job"], options["tenant"]))
        if options["json"]:
            self.stdout.write(to_json([as_json(e, now) for e in endpoints]))
            return
        if not endpoints:
            self.stdout.write("No endpoints match. Import some with manage.py import_endpoints.")
            return
        rows = [as_row(e, now) for e in endpoints]
        headers = ["ID", "ENDPOINT", "SCHEDULE", "NEXT RUN", "LAST", "FAIL", "HINT", "PAUSED"]
        self.stdout.write(table(headers, rows, widest=36))


def select(now: datetime, state: str, job: str | None, tenant: str | None) -> QuerySet[Endpoint]:
    latest = Run.objects.filter(endpoint=OuterRef("pk")).order_by("-started_at", "-pk")
    endpoints = Endpoint.objects.select_related("job__tenant", "slot").annotate(
        last_status=Subquery(latest.values("status")[:1]),
        last_status_code=Subquery(latest.values("status_code")[:1]),
    )
    if job:
        endpoints = endpoints.filter(job__name=job)
    if tenant:
        endpoints = endpoints.filter(job__tenant__name=tenant)
    paused = Q(paused_until__gt=now) | ~Q(job__status=JobStatus.ACTIVE)
    filters = {
        "live": Q(archived_at__isnull=True),
        "active": Q(archived_at__isnull=True) & ~paused,
        "paused": Q(archived_at__isnull=True) & paused,
        "failing": Q(archived_at__isnull=True, failure_count__gt=0),
        "hinted": Q(archived_at__isnull=True, ai_hint_expires_at__gt=now),
        "archived": Q(archived_at__isnull=False),
        "all": Q(),
    }
    return endpoints.filter(filters[state]).order_by("job__tenant__name", "job__name", "name")


def hint_words(endpoint: Endpoint, now: datetime) -> str:
    if not endpoint.ai_hint_expires_at or endpoint.ai_hint_expires_at <= now:
        return "-"
    parts = []
    if endpoint.ai_hint_interval_ms:
        parts.append(f"every {format_interval(endpoint.ai_hint_interval_ms)}")
    if endpoint.ai_hint_next_run_at:
        parts.append(f"once at {endpoint.ai_hint_next_run_at:%H:%M:%S}")
    return f"{', '.join(parts)} until {endpoint.ai_hint_expires_at:%H:%M}"


def pause_words(endpoint: Endpoint, now: datetime) -> str:
    if endpoint.job.status != JobStatus.ACTIVE:
        return f"job {endpoint.job.status}"
    if endpoint.is_paused(now):
        return endpoint.pause_words(now, brief=True)
    return "-"


def schedule_words(endpoint: Endpoint) -> str:
    return describe_schedule(
        baseline_cron=endpoint.baseline_cron,
        timezone=endpoint.timezone,
        baseline_interval_ms=endpoint.baseline_interval_ms,
    )


def as_row(endpoint: Any, now: datetime) -> list[str]:
    last = endpoint.last_status or "-"
    if endpoint.last_status_code:
        last = f"{last} {endpoint.last_status_code}"
    return [
        str(endpoint.pk),
        endpoint.ref,
        schedule_words(endpoint),
        next_run_words(endpoint, now),
        last,
        str(endpoint.failure_count),
        hint_words(endpoint, now),
        pause_words(endpoint, now),
    ]


def as_json(endpoint: Any, now: datetime) -> dict[str, Any]:
    hint_fresh = bool(endpoint.ai_hint_expires_at and endpoint.ai_hint_expires_at > now)
    return {
        "id": endpoint.pk,
        "ref": endpoint.ref,
        "tenant": endpoint.job.tenant.name,
        "job": endpoint.job.name,
        "job_status": endpoint.job.status,
        "name": endpoint.name,
        "method": endpoint.method,
        "url": redact_url(endpoint.url),
        "schedule": schedule_words(endpoint),
        "baseline_cron": endpoint.baseline_cron or None,
        "timezone": endpoint.timezone,
        "baseline_interval_ms": endpoint.baseline_interval_ms,
        "min_interval_ms": endpoint.min_interval_ms,
        "max_interval_ms": endpoint.max_interval_ms,
        "next_run_at": iso(endpoint.next_run_at),
        "next_run_source": endpoint.next_run_source or None,
        "last_run_at": iso(endpoint.last_run_at),
        "last_status": endpoint.last_status,
        "last_status_code": endpoint.last_status_code,
        "failure_count": endpoint.failure_count,
        "hint": {
            "interval_ms": endpoint.ai_hint_interval_ms,
            "next_run_at": iso(endpoint.ai_hint_next_run_at),
            "expires_at": iso(endpoint.ai_hint_expires_at),
            "reason": endpoint.ai_hint_reason,
        }
        if hint_fresh
        else None,
        "paused_until": iso(endpoint.paused_until) if endpoint.is_paused(now) else None,
        "pause_reason": endpoint.pause_reason if endpoint.is_paused(now) else "",
        "archived_at": iso(endpoint.archived_at),
    }
