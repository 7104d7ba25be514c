"""Prometheus metrics: cheap recorders the scheduler calls, and the exposition for /metrics.

Counters and histograms are recorded in the process that does the work (``record_*``).
With ``PROMETHEUS_MULTIPROC_DIR`` set, every process (gunicorn workers, Celery workers,
``runscheduler``) writes them to files in that directory and ``/metrics`` sums the files,
so the web process reports what the workers did; without it they live in this process's
default registry. Gauges that are facts about the database (runs in flight, due backlog,
zombies, last tick age, planner tokens by tenant) are read at scrape time by
``DatabaseCollector``, so they are right whichever process serves the scrape.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import TYPE_CHECKING

from django.core.exceptions import ImproperlyConfigured
from django.db.models import Sum
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    values,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from endpoints.models import Heartbeat, Run, Slot

if TYPE_CHECKING:
    from planner.models import AnalysisSession

MULTIPROC_DIR_VARIABLE = "PROMETHEUS_MULTIPROC_DIR"


def _multiproc_dir() -> str:
    return os.environ.get(MULTIPROC_DIR_VARIABLE, "")


def _use_host_and_pid_in_file_names(directory: str) -> None:
    """Name each process's metric files by host and pid, not pid alone.

    Containers sharing one metrics volume all number their processes from 1: with the
    library's pid-only names, web's pid 7 and a worker's pid 7 would write the same file.
    Underscores are replaced because the collector splits file names on them.
    """
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as exc:
        raise ImproperlyConfigured(
            f"{MULTIPROC_DIR_VARIABLE}={directory!r} cannot be created ({exc}); point it at a "
            "writable directory shared by the web and worker processes, or unset it."
        ) from None
    host = socket.gethostname().replace("_", "-")
    values.ValueClass = values.MultiProcessValue(lambda: f"{host}-{os.getpid()}")


if _multiproc_dir():
    _use_host_and_pid_in_file_names(_multiproc_dir())

RUNS = Counter(
    "cronicorn_runs",
    "Finished runs by status, governor source and trigger.",
    ["status", "source", "trigger"],
)
RUN_DURATION = Histogram(
    "cronicorn_run_duration_seconds",
    "How long an endpoint took to answer (the HTTP call), by run status.",
    ["status"],
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800),
)
RUN_LATENESS = Histogram(
    "cronicorn_run_start_lateness_seconds",
    "How long after its scheduled time a run started, by trigger.",
    ["trigger"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
)
TICK_CLAIMS = Histogram(
    "cronicorn_tick_claims",
    "Endpoints claimed per tick (the _count is the number of ticks).",
    buckets=(0, 1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000),
)
ZOMBIES = Counter(
    "cronicorn_zombie_runs",
    "Runs the zombie sweep marked lost (still running after their lease).",
)
PLANNER_SESSIONS = Counter(
    "cronicorn_planner_sessions",
    "Finished planner analysis sessions by backend and outcome.",
    ["backend", "status"],
)
PLANNER_TOKENS = Counter(
    "cronicorn_planner_tokens",
    "LLM tokens spent by planner sessions, by backend.",
    ["backend"],
)


def record_run(run: Run, *, status: str, duration_ms: int | None) -> None:
    """Count a run that reached ``status``; observe its duration and how late it started.

    The outcome is passed in because the scheduler writes it with a conditional update,
    leaving the instance as it was when the run started.
    """
    RUNS.labels(status=status, source=run.source or "none", trigger=run.trigger).inc()
    if duration_ms is not None:
        RUN_DURATION.labels(status=status).observe(duration_ms / 1000)
    lateness = (run.started_at - run.scheduled_for).total_seconds()
    RUN_LATENESS.labels(trigger=run.trigger).observe(max(lateness, 0.0))


def record_claims(count: int) -> None:
    """One tick claimed ``count`` endpoints (0 included: it counts the tick)."""
    TICK_CLAIMS.observe(count)


def record_zombies(count: int) -> None:
    """The zombie sweep marked ``count`` runs lost."""
    if count:
        ZOMBIES.inc(count)


def record_planner_session(session: AnalysisSession) -> None:
    """Count a finished analysis session and the tokens it spent."""
    PLANNER_SESSIONS.labels(backend=session.backend, status=session.status).inc()
    if session.total_tokens:
        PLANNER_TOKENS.labels(backend=session.backend).inc(session.total_tokens)


class DatabaseCollector(Collector):
    """Gauges read from the database at scrape time, each from an indexed query."""

    def __init__(self, *, now: datetime) -> None:
        self.now = now

    def collect(self) -> Iterator[Metric]:
        yield self._gauge(
            "cronicorn_runs_in_flight",
            "Runs started and not finished yet.",
            Run.objects.filter(status=Run.Status.RUNNING).count(),
        )
        yield self._gauge(
            "cronicorn_zombie_runs_pending",
            "Runs still running after their lease; the next sweep marks them lost.",
            Run.objects.stale(now=self.now).count(),
        )
        yield self._gauge(
            "cronicorn_due_backlog",
            "Endpoints due now and not claimed yet (not paused, archived or in a paused job).",
            _due_backlog(now=self.now),
        )
        from endpoints.scheduling import fleet_behind  # scheduling records these metrics

        behind = fleet_behind(now=self.now)
        yield self._gauge(
            "cronicorn_behind_seconds",
            "How far behind the fleet is: the larger of the p95 start lateness of scheduled "
            "runs over the last minute and the oldest unclaimed due endpoint's wait.",
            behind["behind_seconds"],
        )
        yield self._gauge(
            "cronicorn_fleet_behind",
            "1 when behind_seconds exceeds CRONICORN_BEHIND_SECONDS, else 0.",
            int(behind["fleet_behind"]),
        )
        yield from self._last_tick_age()
        yield self._tokens_by_tenant()

    @staticmethod
    def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
        return GaugeMetricFamily(name, documentation, value=value)

    def _last_tick_age(self) -> Iterable[Metric]:
        beat = Heartbeat.objects.filter(name="tick").first()
        if beat is not None:
            yield self._gauge(
                "cronicorn_last_tick_age_seconds",
                "Seconds since the last tick claimed due endpoints.",
                (self.now - beat.at).total_seconds(),
            )

    def _tokens_by_tenant(self) -> GaugeMetricFamily:
        from planner.models import AnalysisSession  # planner depends on endpoints, not back

        month_start = self.now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        family = GaugeMetricFamily(
            "cronicorn_planner_tokens_this_month",
            "LLM tokens spent by each tenant's planner sessions this calendar month (UTC).",
            labels=["tenant"],
        )
        rows = (
            AnalysisSession.objects.filter(started_at__gte=month_start)
            .values_list("endpoint__job__tenant__name")
            .annotate(tokens=Sum("total_tokens"))
            .order_by()
        )
        for tenant, tokens in rows:
            family.add_metric([tenant], tokens or 0)
        return family


def _due_backlog(*, now: datetime) -> int:
    return Slot.objects.overdue(now).count()


class _ThisProcess(Collector):
    """The default registry (this process's recorders and process stats), as a collector."""

    def collect(self) -> Iterable[Metric]:
        return REGISTRY.collect()


def render_metrics(*, now: datetime) -> tuple[bytes, str]:
    """The Prometheus text exposition and its content type."""
    registry = CollectorRegistry()
    if _multiproc_dir():
        MultiProcessCollector(registry)
    else:
        registry.register(_ThisProcess())
    registry.register(DatabaseCollector(now=now))
    return generate_latest(registry), CONTENT_TYPE_LATEST
