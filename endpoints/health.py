"""Is the scheduler healthy? Numbers for ``scheduler_status``, the dashboard, the API,
``/readyz`` and ``runscheduler``'s summary line, read from the database; and when each
of the scheduler's loops last ran and what it did (``loop_beats``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, TypedDict

from django.conf import settings
from django.db.models import Count, Q

from endpoints.choices import FAILED_STATUSES
from endpoints.models import Heartbeat, Run, RunStatus, RunTrigger, Slot
from endpoints.wording import duration_words

HEALTH_LATENESS_SAMPLE = 10_000

# A scheduled run that starts later than this is a catch-up after downtime (no scheduler
# was running when it came due), counted apart from lateness. Leases and ticks are
# seconds, so a running scheduler is never this late unless it is overloaded.
CATCHUP_AFTER = timedelta(minutes=1)

# The scheduler's loops, as the dashboard and scheduler_status list them: each pass of
# one (a Celery task or a loop of runscheduler, the same function) ends by writing its
# Heartbeat row with counts of what it did. These rows, not Celery task results, are
# what says a loop runs (docs/DESIGN.md, "Processes").
LOOPS = (
    ("tick", "Tick"),
    ("maintenance", "Zombie sweep"),
    ("prune", "Run retention"),
    ("planner", "Planner"),
    ("notify", "Alerts"),
)


class LatenessStats(TypedDict):
    lateness_p50_ms: float | None
    lateness_p95_ms: float | None
    catchup_runs_last_hour: int
    catchup_max_late_ms: float | None


class FleetBehind(TypedDict):
    oldest_due_seconds: float
    lateness_recent_p95_ms: float | None
    behind_seconds: float
    fleet_behind: bool
    behind_warning: str


class HealthReport(LatenessStats, FleetBehind):
    last_tick_at: datetime | None
    last_tick_age_seconds: float | None
    due_backlog: int
    in_flight: int
    runs_last_hour: int
    failures_last_hour: int
    zombies: int


class LoopBeat(TypedDict):
    name: str
    label: str
    at: datetime | None
    age_seconds: float | None
    info: dict[str, Any]
    did: str


class MinuteSummary(TypedDict):
    runs: int
    failures: int
    lateness_p95_ms: float | None


def scheduler_health(*, now: datetime) -> HealthReport:
    """Numbers for scheduler_status, the dashboard and /readyz.

    Keys: last_tick_at, last_tick_age_seconds (None before the first tick), due_backlog
    (claimable endpoints already due), in_flight (running runs), lateness_p50_ms and
    lateness_p95_ms (scheduled and retry runs started in the last hour, the latest
    10 000 at most, catch-up runs left out), catchup_runs_last_hour and
    catchup_max_late_ms (runs that started more than ``CATCHUP_AFTER`` late: after
    downtime each overdue endpoint runs once, which says nothing of the scheduler's
    punctuality), runs_last_hour, failures_last_hour, zombies, and whether the fleet
    keeps up (see ``fleet_behind``).
    """
    beat = Heartbeat.objects.filter(name="tick").first()
    hour_ago = now - timedelta(hours=1)
    recent = Run.objects.filter(started_at__gte=hour_ago, started_at__lte=now)
    return {  # type: ignore[typeddict-item]  # the ** parts are typed dicts of their own
        "last_tick_at": beat.at if beat else None,
        "last_tick_age_seconds": (now - beat.at).total_seconds() if beat else None,
        "due_backlog": Slot.objects.overdue(now).count(),
        **fleet_behind(now=now),
        "in_flight": Run.objects.filter(status=RunStatus.RUNNING).count(),
        **lateness_stats(recent),
        "runs_last_hour": recent.count(),
        "failures_last_hour": recent.filter(status__in=FAILED_STATUSES).count(),
        "zombies": Run.objects.stale(now=now).count(),
    }


def scoped_health(*, tenant_ids: list[int] | None, now: datetime) -> HealthReport:
    """``scheduler_health`` as a member of these tenants may see it (None: every tenant).

    The scheduler's liveness (last tick, how far behind the fleet is) is the same for
    everyone; the numbers that count rows are counted over these tenants' endpoints
    only, so no other tenant's volume shows through. Same definitions as above.
    """
    health = scheduler_health(now=now)
    if tenant_ids is None:
        return health
    runs = Run.objects.filter(endpoint__job__tenant__in=tenant_ids)
    hour = runs.filter(started_at__gte=now - timedelta(hours=1), started_at__lte=now)
    counts = hour.aggregate(
        total=Count("pk"), failed=Count("pk", filter=Q(status__in=FAILED_STATUSES))
    )
    due = Slot.objects.overdue(now).filter(job__tenant__in=tenant_ids)
    return {
        **health,
        "due_backlog": due.count(),
        "in_flight": runs.filter(status=RunStatus.RUNNING).count(),
        "runs_last_hour": counts["total"],
        "failures_last_hour": counts["failed"],
        **lateness_stats(hour),
    }


def fleet_behind(*, now: datetime) -> FleetBehind:
    """Is the fleet keeping up? It is behind when, over the last minute, the p95 of
    scheduled runs' start lateness exceeds ``CRONICORN_BEHIND_SECONDS``, or an endpoint
    has waited longer than that, due and unclaimed (the ticks cannot claim it: a slow or
    dead tick). Jobs with ``max_concurrent`` are left out of the second test: their
    endpoints wait for a free place by design.

    Keys: oldest_due_seconds, lateness_recent_p95_ms, behind_seconds (the larger of the
    two, in seconds), fleet_behind (bool) and behind_warning (what to do, or "").
    """
    oldest = (
        Slot.objects.overdue(now)
        .filter(job__max_concurrent__isnull=True)
        .order_by("next_run_at")
        .values_list("next_run_at", flat=True)
        .first()
    )
    oldest_due = max((now - oldest).total_seconds(), 0.0) if oldest else 0.0
    minute = Run.objects.filter(started_at__gte=now - timedelta(minutes=1), started_at__lte=now)
    recent_p95 = percentile(_lateness_sample(minute, triggers=[RunTrigger.SCHEDULED]), 0.95)
    behind = max(oldest_due, (recent_p95 or 0.0) / 1000)
    limit = settings.CRONICORN_BEHIND_SECONDS
    warning = ""
    if behind > limit:
        warning = (
            f"The fleet is behind by {duration_words(behind * 1000)}: p95 start lateness over "
            f"the last minute {duration_words(recent_p95 or 0)}, oldest unclaimed due endpoint "
            f"{duration_words(oldest_due * 1000)} overdue (limit "
            f"CRONICORN_BEHIND_SECONDS={limit:g}). Add execute workers or raise "
            "CRONICORN_MAX_IN_FLIGHT; if the backlog grows while runs are on time, "
            "the ticks are too slow."
        )
    return {
        "oldest_due_seconds": round(oldest_due, 1),
        "lateness_recent_p95_ms": recent_p95,
        "behind_seconds": round(behind, 1),
        "fleet_behind": bool(warning),
        "behind_warning": warning,
    }


def loop_beats(*, now: datetime) -> list[LoopBeat]:
    """Each loop of ``LOOPS``: when it last ran (None: never), its counts (``info``) and
    the same in words (``did``: "claimed 3", "sessions 2, failed 0")."""
    beats = Heartbeat.objects.in_bulk([name for name, _ in LOOPS], field_name="name")
    rows: list[LoopBeat] = []
    for name, label in LOOPS:
        beat = beats.get(name)
        info = beat.info if beat else {}
        rows.append(
            {
                "name": name,
                "label": label,
                "at": beat.at if beat else None,
                "age_seconds": round((now - beat.at).total_seconds(), 1) if beat else None,
                "info": info,
                "did": ", ".join(
                    f"{key.replace('_', ' ')} {info[key]}" for key in sorted(info, key=_said_order)
                ),
            }
        )
    return rows


def _said_order(key: str) -> tuple[bool, str]:
    """PostgreSQL's jsonb keeps no key order (it sorts keys by length), so the counts are
    said in one of their own: alphabetical, failures last ("sessions 3, failed 0")."""
    return key == "failed", key


def minute_summary(*, now: datetime) -> MinuteSummary:
    """runscheduler's summary line: runs, failures and lateness p95 over the last minute."""
    recent = Run.objects.filter(started_at__gte=now - timedelta(minutes=1), started_at__lte=now)
    return {
        "runs": recent.count(),
        "failures": recent.filter(status__in=FAILED_STATUSES).count(),
        "lateness_p95_ms": lateness_stats(recent)["lateness_p95_ms"],
    }


def lateness_stats(runs: Any) -> LatenessStats:
    """Lateness p50/p95 of these runs' scheduled starts, catch-up runs counted apart."""
    ordered = _lateness_sample(runs)
    limit = CATCHUP_AFTER.total_seconds() * 1000
    punctual = [ms for ms in ordered if ms <= limit]
    catchup = [ms for ms in ordered if ms > limit]
    return {
        "lateness_p50_ms": percentile(punctual, 0.50),
        "lateness_p95_ms": percentile(punctual, 0.95),
        "catchup_runs_last_hour": len(catchup),
        "catchup_max_late_ms": round(catchup[-1], 1) if catchup else None,
    }


def _lateness_sample(recent: Any, triggers: Sequence[str] = ()) -> list[float]:
    rows = (
        recent.filter(trigger__in=triggers or [RunTrigger.SCHEDULED, RunTrigger.RETRY])
        .order_by("-started_at")
        .values_list("started_at", "scheduled_for")[:HEALTH_LATENESS_SAMPLE]
    )
    return sorted(max((s - d).total_seconds() * 1000, 0.0) for s, d in rows)


def percentile(ordered: list[float], fraction: float) -> float | None:
    if not ordered:
        return None
    index = min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))
    return round(ordered[index], 1)
