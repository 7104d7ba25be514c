"""Alerts and run policies. The breaker's opening is told once per failure streak, with
its reason, however many failed probes re-open it; a probe that succeeds is told as a
recovery. A test run is judged by the success criteria as a scheduled run is, so one
that fails them is no recovery. The in-process scheduler (what ``runscheduler`` runs)
calls a real HTTP target on 127.0.0.1; the notify cycle's detection runs between its
ticks."""

from __future__ import annotations

import io
import time
from collections.abc import Callable
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db.models import F
from django.utils import timezone

from endpoints.choices import PauseSource
from endpoints.embedded import EmbeddedScheduler
from endpoints.models import Endpoint, HintHistory, HintKind, Job, Run, RunStatus, Slot
from endpoints.operations import (
    OperationRefused,
    pause_endpoint,
    reset_failures,
    run_now,
    test_endpoint,
)
from notifications.alerts import detect_changes
from notifications.models import Alert, AlertKind, AlertRule
from tests.planning import finished, tick_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("loopback_allowed")]


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


def test_a_breaker_without_a_cool_down_is_said_to_be_paused_until_resumed(
    scheduler, job, make_endpoint, target
):
    job.run_policy = {"breaker_failed_slots": 1}
    job.full_clean()
    job.save()
    target.reply("/gone", status=500)
    endpoint = make_endpoint(
        url=target.url("/gone"), baseline_interval_ms=1_000, next_run_at=timezone.now()
    )
    assert tick_and_detect_until(scheduler, lambda: bool(alerts(endpoint, AlertKind.PAUSED)), 20)

    [paused] = alerts(endpoint, AlertKind.PAUSED)
    assert paused.detail.startswith("paused until resumed: Breaker: 1 failed slot in a row")
    assert paused.detail.endswith("; resume it once the cause is fixed")
    out = io.StringIO()
    call_command("endpoints", stdout=out)
    [line] = [line for line in out.getvalue().splitlines() if endpoint.ref in line]
    assert line.endswith("until resumed")
    with pytest.raises(OperationRefused, match="is paused until resumed; resume it first"):
        run_now(Endpoint.objects.get(pk=endpoint.pk), now=timezone.now())


def test_a_person_whose_pause_reason_reads_like_the_breakers_is_a_persons_pause(job, make_endpoint):
    """Who paused is stored (``pause_source``), not read from the words: a person may
    write anything as the reason (issue 32: alerts told the breaker by a text prefix)."""
    endpoint = make_endpoint()
    now = timezone.now()
    words = "Breaker: 2 failed slots in a row (last: HTTP 503); resume it once the cause is fixed"
    pause_endpoint(endpoint, now=now, until=now + timedelta(hours=2), reason=words)
    endpoint.refresh_from_db()
    assert endpoint.pause_source == PauseSource.PERSON
    assert endpoint.pause_words(now).startswith("until ")
    assert "resumed" not in endpoint.pause_words(now)

    detect_changes(now=now)
    [paused] = alerts(endpoint, AlertKind.PAUSED)
    assert not paused.detail.startswith("paused until resumed")
    # A person's pause is no breaker episode: moving it is told again.
    pause_endpoint(endpoint, now=now, until=now + timedelta(hours=3), reason=words)
    detect_changes(now=now)
    assert len(alerts(endpoint, AlertKind.PAUSED)) == 2


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


def test_a_test_run_failing_the_success_criteria_is_no_recovery_after_a_reset(
    scheduler, job, make_endpoint, target
):
    job.run_policy = {"body_json_path": "status", "body_json_equals": "ok"}
    job.full_clean()
    job.save()
    target.reply("/status", status=200, body={"status": "error"})
    endpoint = make_endpoint(
        url=target.url("/status"), baseline_interval_ms=1_000, next_run_at=timezone.now()
    )
    assert tick_and_detect_until(scheduler, lambda: bool(alerts(endpoint, AlertKind.FAILING)), 20)
    # No more ticks: wait for a run still in flight, so the test run below is the last.
    assert target.wait_for(
        lambda: (
            not Run.objects.filter(endpoint=endpoint, status=RunStatus.RUNNING).exists()
            and Slot.objects.filter(pk=endpoint.pk, claim_token__isnull=True).exists()
        ),
        timeout=10,
    )

    # A person resets the failures and tries it by hand, past the tenant's floor (1 s)
    # since the last scheduled run: the answer is still wrong.
    earlier = timedelta(seconds=2)
    Run.objects.filter(endpoint=endpoint).update(
        started_at=F("started_at") - earlier, finished_at=F("finished_at") - earlier
    )
    reset_failures(endpoint, now=timezone.now())
    run = test_endpoint(endpoint)
    detect_changes(now=timezone.now())
    detect_changes(now=timezone.now())

    assert (run.status, run.status_code) == (RunStatus.FAILURE, 200)
    assert run.error == 'status is "error", expected "ok"'
    assert alerts(endpoint, AlertKind.RECOVERED) == []


def test_the_failing_alert_names_the_last_failed_run_not_a_slot_skipped_since(
    scheduler, job, make_endpoint, target
):
    job.run_policy = {"catchup_window_ms": 60_000}
    job.full_clean()
    job.save()
    AlertRule.objects.create(job=job, after_failures=2)
    target.reply("/down", status=500)
    endpoint = make_endpoint(
        url=target.url("/down"), baseline_interval_ms=1_000, next_run_at=timezone.now()
    )
    assert tick_until(scheduler, finished(endpoint, 2), timeout=20)
    # Then an outage: the next slot is found hours late, skipped (no failure counted).
    Slot.objects.filter(pk=endpoint.pk).update(next_run_at=timezone.now() - timedelta(hours=6))
    assert tick_until(scheduler, finished(endpoint, 3), timeout=20)
    assert [run.status for run in Run.objects.filter(endpoint=endpoint).order_by("pk")] == [
        RunStatus.FAILURE,
        RunStatus.FAILURE,
        RunStatus.SKIPPED,
    ]

    [alert] = detect_changes(now=timezone.now())
    assert alert.kind == AlertKind.FAILING
    assert alert.detail.startswith("2 failed runs in a row; last: failure HTTP 500"), alert.detail
