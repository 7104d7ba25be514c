"""Alerts about a run policy's breaker: its opening is told once per failure streak,
with its reason, however many failed probes re-open it; a probe that succeeds is told as
a recovery. The in-process scheduler (what ``runscheduler`` runs) calls a real HTTP
target on 127.0.0.1; the notify cycle's detection runs between its ticks."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from django.utils import timezone

from endpoints.embedded import EmbeddedScheduler
from endpoints.models import Endpoint, HintHistory, HintKind, Job, Run
from notifications.alerts import detect_changes
from notifications.models import Alert, AlertKind

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("loopback_allowed")]


@pytest.fixture
def scheduler():
    embedded = EmbeddedScheduler(max_in_flight=4)
    yield embedded
    embedded.shutdown(timeout=10)


def tick_and_detect_until(
    scheduler: EmbeddedScheduler, condition: Callable[[], bool], timeout: float
) -> bool:
    """Tick as ``runscheduler`` does, with the notify cycle's detection after each tick."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        scheduler.tick_once()
        detect_changes(now=timezone.now())
        if condition():
            return True
        time.sleep(0.2)
    return condition()


def breaker_job(job: Job) -> Job:
    job.run_policy = {"breaker_failed_slots": 2, "breaker_cooldown_ms": 1_000}
    job.full_clean()
    job.save()
    return job


def breaker_pauses(endpoint: Endpoint) -> int:
    return HintHistory.objects.filter(
        endpoint=endpoint, kind=HintKind.PAUSE, reason__startswith="Breaker:"
    ).count()


def alerts(endpoint: Endpoint, kind: AlertKind) -> list[Alert]:
    return list(Alert.objects.filter(endpoint=endpoint, kind=kind).order_by("pk"))


def test_failed_probes_reopening_the_breaker_are_not_told_again(
    scheduler, job, make_endpoint, target
):
    breaker_job(job)
    target.reply("/down", status=500)
    endpoint = make_endpoint(
        url=target.url("/down"), baseline_interval_ms=1_000, next_run_at=timezone.now()
    )

    # Opened after 2 failed slots, then re-opened by two failed probes.
    assert tick_and_detect_until(scheduler, lambda: breaker_pauses(endpoint) >= 3, timeout=30)
    detect_changes(now=timezone.now())

    [paused] = alerts(endpoint, AlertKind.PAUSED)
    assert "Breaker: 2 failed slots in a row" in paused.detail
    # The breaker already said it is broken: the probes' failures are not told again.
    assert alerts(endpoint, AlertKind.FAILING) == []


def test_a_probe_that_closes_the_breaker_is_told_as_a_recovery(
    scheduler, job, make_endpoint, target
):
    breaker_job(job)  # 2 failed slots open it, below the default rule's 3 failures
    target.reply("/bad", status=500)
    endpoint = make_endpoint(
        url=target.url("/bad"), baseline_interval_ms=1_000, next_run_at=timezone.now()
    )
    assert tick_and_detect_until(scheduler, lambda: bool(alerts(endpoint, AlertKind.PAUSED)), 20)
    target.reply("/bad", status=200)

    assert tick_and_detect_until(
        scheduler, lambda: Run.objects.filter(endpoint=endpoint, status="success").exists(), 20
    )
    detect_changes(now=timezone.now())
    detect_changes(now=timezone.now())

    [recovered] = alerts(endpoint, AlertKind.RECOVERED)
    assert recovered.detail.startswith("succeeded again (HTTP 200) after")
    assert len(alerts(endpoint, AlertKind.PAUSED)) == 1
