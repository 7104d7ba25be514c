"""The Prometheus exposition served at ``/metrics``.

What the processes recorded (``endpoints.engine.metrics``: this process's registry, or
every process's files under ``PROMETHEUS_MULTIPROC_DIR``), plus gauges that are facts
about the database (runs in flight, due backlog, zombies, how far behind the fleet is,
last tick age, planner tokens by tenant), read at scrape time by ``DatabaseCollector`` so
they are right whichever process serves the scrape.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import datetime

from django.db.models import Sum
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from endpoints.engine.metrics import multiproc_dir
from endpoints.health import fleet_behind
from endpoints.models import Heartbeat, Run, Slot
from planner.models import AnalysisSession


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
        family = GaugeMetricFamily(
            "cronicorn_planner_tokens_this_month",
            "LLM tokens spent by each tenant's planner sessions this calendar month (UTC).",
            labels=["tenant"],
        )
        rows = (
            AnalysisSession.objects.this_month(self.now)
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
    if multiproc_dir():
        MultiProcessCollector(registry)
    else:
        registry.register(_ThisProcess())
    registry.register(DatabaseCollector(now=now))
    return generate_latest(registry), CONTENT_TYPE_LATEST
