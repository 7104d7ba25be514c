"""Planning and running on the real clock, for the tests that tick the embedded scheduler:
where the engine plans an endpoint's next baseline-interval run (a run starts a few ms
after its slot), ticking until a condition holds, a job's run policy, an endpoint's runs
and when they are all finished."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from endpoints.embedded import EmbeddedScheduler
from endpoints.models import Endpoint, Job, Run, RunStatus, Slot

DAY_MS = 86_400_000


def daily_cron_far_from_now() -> str:
    """A daily cron whose next instant is about 12 h away: a fixed hour (09:00) lets a test
    that runs just before it see the next day's run as well."""
    return f"0 {(timezone.now() + timedelta(hours=12)).hour} * * *"


def planned_after(run: Run, interval: timedelta, floor: timedelta = timedelta(0)) -> datetime:
    """Start to start when on time; a late run's next slot of its own phase at least half
    an interval (and the minimum intervals, ``floor``) after its start
    (the governor's ``phase_slot``)."""
    late = run.started_at - run.scheduled_for
    gap = max(interval / 2, floor)
    if late <= timedelta(0) or gap >= interval:
        return run.started_at + interval
    planned = run.scheduled_for + interval
    while planned < run.started_at + gap:
        planned += interval
    return planned


def tick_until(scheduler: EmbeddedScheduler, condition: Callable[[], bool], timeout: float) -> bool:
    """Tick as ``runscheduler`` does (every 0.2 s here) until ``condition`` or ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        scheduler.tick_once()
        if condition():
            return True
        time.sleep(0.2)
    return condition()


def policy_job(job: Job, **policy: Any) -> Job:
    job.run_policy = policy
    job.full_clean()
    job.save()
    return job


def runs(endpoint: Endpoint) -> list[Run]:
    return list(Run.objects.filter(endpoint=endpoint).order_by("pk"))


def finished(endpoint: Endpoint, count: int) -> Callable[[], bool]:
    return lambda: (
        Run.objects.filter(endpoint=endpoint).exclude(status=RunStatus.RUNNING).count() >= count
        and Slot.objects.filter(pk=endpoint.pk, claim_token__isnull=True).exists()
    )
