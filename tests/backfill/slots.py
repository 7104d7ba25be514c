"""The range of the backfill scenarios (issue 33): four hours of a five-minute cron, ended
before now, with ten of its 48 slots already run successfully (Run rows written
directly) and the other 38 not; and how to count what a target saw of them."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

from django.utils import timezone

from endpoints.backfill import backfill_progress
from endpoints.backfill_models import Backfill
from endpoints.choices import BackfillStatus
from endpoints.models import Endpoint, Run, RunStatus, RunTrigger

CRON = "*/5 * * * *"
SLOTS = 48
RAN = 10


def the_range() -> tuple[datetime, datetime]:
    """Four hours ending at a five-minute boundary at least ten minutes ago."""
    now = timezone.now()
    end = now.replace(second=0, microsecond=0) - timedelta(minutes=now.minute % 5 + 10)
    return end - timedelta(hours=4), end


def slot_times(start: datetime) -> list[datetime]:
    return [start + timedelta(minutes=5 * k) for k in range(SLOTS)]


def ran_successfully(endpoint: Endpoint, start: datetime) -> list[datetime]:
    """Ten slots (every fourth, from the first) with a successful scheduled run."""
    done = slot_times(start)[::4][:RAN]
    for at in done:
        Run.objects.create(
            endpoint=endpoint,
            trigger=RunTrigger.SCHEDULED,
            scheduled_for=at,
            started_at=at,
            finished_at=at + timedelta(milliseconds=20),
            duration_ms=20,
            status=RunStatus.SUCCESS,
            status_code=200,
        )
    return done


def stamp(at: datetime) -> str:
    return at.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def slots_called(hits: list[Any]) -> Counter[str]:
    """How often each slot was called, by its X-Cronicorn-Scheduled-For."""
    return Counter(hit.headers["X-Cronicorn-Scheduled-For"] for hit in hits)


def ended(*backfills: Backfill) -> bool:
    return all(
        Backfill.objects.get(pk=b.pk).status == BackfillStatus.DONE
        and backfill_progress(b)["started"] == 0
        for b in backfills
    )
