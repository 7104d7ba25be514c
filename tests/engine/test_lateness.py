"""Lateness is measured on scheduled runs that started while a scheduler was running;
catch-up runs after downtime are counted apart, and durations read in words."""

from __future__ import annotations

from datetime import timedelta

import pytest

from endpoints.health import scheduler_health
from endpoints.models import Run, RunStatus
from endpoints.wording import duration_words

pytestmark = pytest.mark.django_db


def test_catch_up_runs_after_downtime_are_counted_apart_from_lateness(make_endpoint, now):
    endpoint = make_endpoint()
    late_by = [timedelta(milliseconds=ms) for ms in (20, 30, 40, 340)] + [
        timedelta(minutes=5, seconds=36)  # a restart after downtime: one coalesced run
    ]
    slots = [now - timedelta(minutes=10 + k) for k in range(len(late_by))]
    Run.objects.bulk_create(
        Run(endpoint=endpoint, scheduled_for=slot, started_at=slot + late, status=RunStatus.SUCCESS)
        for slot, late in zip(slots, late_by, strict=True)
    )

    health = scheduler_health(now=now)

    assert health["lateness_p95_ms"] == 340.0
    assert health["catchup_runs_last_hour"] == 1
    assert health["catchup_max_late_ms"] == 336_000.0
    assert duration_words(health["catchup_max_late_ms"]) == "5 minutes 36 seconds"
