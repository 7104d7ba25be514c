"""Prometheus recorders: cheap counters and histograms the scheduler and planner update.

Counters and histograms are recorded in the process that does the work (``record_*``).
With ``PROMETHEUS_MULTIPROC_DIR`` set, every process (gunicorn workers, Celery workers,
``runscheduler``) writes them to files in that directory and ``/metrics`` sums the files,
so the web process reports what the workers did; without it they live in this process's
default registry. The exposition (``console.metrics``) adds the gauges that are facts
about the database, read at scrape time.
"""

from __future__ import annotations

import os
import socket

from django.core.exceptions import ImproperlyConfigured
from prometheus_client import (
    Counter,
    Histogram,
    values,
)

from endpoints.models import Run

MULTIPROC_DIR_VARIABLE = "PROMETHEUS_MULTIPROC_DIR"


def multiproc_dir() -> str:
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


if multiproc_dir():
    _use_host_and_pid_in_file_names(multiproc_dir())

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


def record_planner_session(*, backend: str, status: str, tokens: int) -> None:
    """Count a finished analysis session and the tokens it spent."""
    PLANNER_SESSIONS.labels(backend=backend, status=status).inc()
    if tokens:
        PLANNER_TOKENS.labels(backend=backend).inc(tokens)
