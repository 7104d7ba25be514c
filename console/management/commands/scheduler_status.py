"""``manage.py scheduler_status``: is the scheduler alive, and how is it doing?"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db.models import Count, Q, Sum
from django.utils import timezone

from endpoints.health import loop_beats, scheduler_health
from endpoints.management.commands._shared import iso, to_json
from endpoints.models import Heartbeat
from endpoints.wording import count_words, duration_words
from planner.models import AnalysisSession, SessionStatus


class Command(BaseCommand):
    help = (
        "Show scheduler health: last tick and its age, due backlog, runs in flight, "
        "lateness (p50/p95) and failures over the last hour, zombies, whether the fleet "
        "keeps up (a warning when runs start more than CRONICORN_BEHIND_SECONDS late), "
        "the planner's sessions, and when each loop (tick, zombie sweep, run retention, "
        "planner, alerts) last ran and what it did. Exits non-zero when the last tick is "
        "older than CRONICORN_READY_MAX_TICK_AGE_SECONDS (or --max-tick-age), so it works as a "
        "health probe."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--max-tick-age",
            type=float,
            metavar="SECONDS",
            help="How old the last tick may be (default: CRONICORN_READY_MAX_TICK_AGE_SECONDS"
            f", now {settings.CRONICORN_READY_MAX_TICK_AGE_SECONDS}).",
        )
        parser.add_argument("--json", action="store_true", help="JSON, for scripts.")

    def handle(self, *args: Any, **options: Any) -> None:
        now = timezone.now()
        limit = options["max_tick_age"] or float(settings.CRONICORN_READY_MAX_TICK_AGE_SECONDS)
        status = collect_status(now, max_tick_age=limit)
        if options["json"]:
            self.stdout.write(to_json(status))
        else:
            self.stdout.write(as_text(status))
        if not status["healthy"]:
            raise CommandError(status["problem"])


def collect_status(now: datetime, *, max_tick_age: float) -> dict[str, Any]:
    health = scheduler_health(now=now)
    age = health["last_tick_age_seconds"]
    problem = ""
    if age is None:
        problem = "The scheduler has never ticked; start manage.py runscheduler (or Celery)."
    elif age > max_tick_age:
        problem = (
            f"The scheduler looks dead: the last tick was {age:.0f} s ago (limit "
            f"{max_tick_age:.0f} s); check runscheduler, or celery beat and the tick worker."
        )
    return {
        **health,
        "last_tick_at": iso(health["last_tick_at"]),
        "healthy": not problem,
        "problem": problem,
        "max_tick_age_seconds": max_tick_age,
        "maintenance_at": _beat_at("maintenance"),
        "planner": planner_status(now),
        "loops": [{**loop, "at": iso(loop["at"])} for loop in loop_beats(now=now)],
    }


def _beat_at(name: str) -> str | None:
    beat = Heartbeat.objects.filter(name=name).first()
    return iso(beat.at) if beat else None


def planner_status(now: datetime) -> dict[str, Any]:
    hour = AnalysisSession.objects.filter(started_at__gte=now - timedelta(hours=1))
    totals = hour.aggregate(
        sessions=Count("pk"),
        failed=Count("pk", filter=Q(status=SessionStatus.FAILED)),
        tokens=Sum("total_tokens"),
    )
    return {
        "backend": settings.CRONICORN_PLANNER_BACKEND,
        "last_cycle_at": _beat_at("planner"),
        "sessions_last_hour": totals["sessions"],
        "failed_sessions_last_hour": totals["failed"],
        "tokens_last_hour": totals["tokens"] or 0,
        "running": AnalysisSession.objects.filter(status=SessionStatus.RUNNING).count(),
    }


def as_text(status: dict[str, Any]) -> str:
    age = status["last_tick_age_seconds"]
    planner = status["planner"]
    late = "-"
    if status["lateness_p50_ms"] is not None:
        late = (
            f"p50 {duration_words(status['lateness_p50_ms'])}, "
            f"p95 {duration_words(status['lateness_p95_ms'])}"
        )
    if status["catchup_runs_last_hour"]:
        catchups = count_words(status["catchup_runs_last_hour"], "catch-up run")
        late += (
            f"; {catchups} after downtime, up to "
            f"{duration_words(status['catchup_max_late_ms'])} late"
        )
    keeping_up = "NO, " + status["behind_warning"] if status["fleet_behind"] else "yes"
    if not status["healthy"]:
        # No ticks: nothing is claimed, so "add workers" would be the wrong advice.
        keeping_up = "unknown: the scheduler is not running (see above)"
    lines = [
        f"Scheduler:   {'healthy' if status['healthy'] else 'NOT HEALTHY: ' + status['problem']}",
        f"Last tick:   {status['last_tick_at'] or 'never'}"
        + (f" ({duration_words(age * 1000)} ago)" if age is not None else ""),
        f"Due backlog: {count_words(status['due_backlog'], 'endpoint')} due and not yet claimed",
        f"In flight:   {count_words(status['in_flight'], 'run')}; zombies: {status['zombies']}",
        f"Last hour:   {count_words(status['runs_last_hour'], 'run')}, "
        f"{status['failures_last_hour']} failed; lateness {late}",
        f"Keeping up:  {keeping_up}",
        f"Planner:     {planner['backend']}; last cycle {planner['last_cycle_at'] or 'never'}; "
        f"{count_words(planner['sessions_last_hour'], 'session')} in the last hour "
        f"({planner['failed_sessions_last_hour']} failed, {planner['tokens_last_hour']} tokens)",
        "Loops (last run, what it did):",
        *(_loop_line(loop) for loop in status["loops"]),
    ]
    return "\n".join(lines)


def _loop_line(loop: dict[str, Any]) -> str:
    """One loop of ``collect_status``'s ``loops`` (its time already in ISO 8601)."""
    if loop["at"] is None:
        return f"  {loop['label']:<14} never"
    return (
        f"  {loop['label']:<14} {loop['at']} ({loop['age_seconds']:.1f} s ago)"
        f"{': ' + loop['did'] if loop['did'] else ''}"
    )
