"""Run policies end to end: the in-process scheduler (what ``runscheduler`` runs) against a
real HTTP target on 127.0.0.1 whose answers are switched during the test."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from endpoints import operations, policies
from endpoints.engine import sql
from endpoints.governor import explain_plan
from endpoints.models import (
    Endpoint,
    HintHistory,
    HintKind,
    Job,
    Run,
    RunStatus,
    RunTrigger,
    Slot,
)
from notifications.alerts import detect_changes
from notifications.models import AlertKind
from tests.planning import (
    DAY_MS,
    daily_cron_far_from_now,
    finished,
    planned_after,
    policy_job,
    runs,
    tick_until,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("loopback_allowed")]


def test_a_daily_endpoint_with_one_transient_503_succeeds_on_its_retry(
    scheduler, job, make_endpoint, target
):
    policy_job(job, retry_attempts=3, retry_delay_ms=1_000)
    target.reply("/flaky", status=503, action=lambda: target.reply("/flaky", status=200))
    endpoint = make_endpoint(
        url=target.url("/flaky"), baseline_interval_ms=DAY_MS, next_run_at=timezone.now()
    )

    assert tick_until(scheduler, finished(endpoint, 2), timeout=20)

    first, second = runs(endpoint)
    assert (first.status, first.status_code, first.attempt) == (RunStatus.FAILURE, 503, 1)
    assert (second.status, second.attempt, second.retry_of_id) == (RunStatus.SUCCESS, 2, first.pk)
    assert second.trigger == RunTrigger.SCHEDULED and second.source == "retry"
    # The retry waited the policy's delay (1 s) after the failed attempt, not a day.
    assert timedelta(seconds=1) <= second.started_at - first.finished_at < timedelta(seconds=5)
    endpoint.refresh_from_db()
    assert (endpoint.failure_count, endpoint.retry_attempt, endpoint.retry_of_run) == (0, 0, None)
    # The next slot is a day after the retry (no backoff: the slot succeeded).
    assert endpoint.next_run_at == planned_after(second, timedelta(days=1))


def test_retries_stop_after_the_attempts_and_the_slot_fails_once(
    scheduler, job, make_endpoint, target
):
    policy_job(job, retry_attempts=2, retry_delay_ms=1_000)
    target.reply("/down", status=500)
    endpoint = make_endpoint(
        url=target.url("/down"), baseline_interval_ms=DAY_MS, next_run_at=timezone.now()
    )

    assert tick_until(scheduler, finished(endpoint, 2), timeout=20)
    # The retry delay (1 s) passed in the data, not on the clock: nothing more is due.
    assert not scheduler.tick_once(now=timezone.now() + timedelta(seconds=1.5))

    assert [run.attempt for run in runs(endpoint)] == [1, 2]
    endpoint.refresh_from_db()
    assert endpoint.failure_count == 1  # one failed slot, however many attempts
    # Backed off, but capped at the default cap: max(a day, 1 h) = a day, not two.
    assert endpoint.next_run_at == planned_after(runs(endpoint)[-1], timedelta(days=1))


def test_a_401_is_not_retried_and_trips_the_breaker_when_so_configured(
    scheduler, job, make_endpoint, target
):
    policy_job(job, retry_attempts=3, retry_delay_ms=1_000, breaker_needs_person=True)
    target.reply("/locked", status=401)
    endpoint = make_endpoint(url=target.url("/locked"), next_run_at=timezone.now())

    assert tick_until(
        scheduler,
        lambda: Endpoint.objects.filter(pk=endpoint.pk, paused_until__isnull=False).exists(),
        timeout=20,
    )
    # The retry delay (1 s) passed in the data, not on the clock: nothing more is due.
    assert not scheduler.tick_once(now=timezone.now() + timedelta(seconds=1.5))

    assert len(target.hits("/locked")) == 1  # not retried
    endpoint.refresh_from_db()
    assert endpoint.paused_until > timezone.now() + timedelta(days=300)
    assert endpoint.pause_reason.startswith("Breaker: a failure a person must fix")
    assert "401" in endpoint.pause_reason
    pause = HintHistory.objects.get(endpoint=endpoint, kind=HintKind.PAUSE)
    assert pause.reason == endpoint.pause_reason
    assert Slot.objects.get(pk=endpoint.pk).next_run_at == endpoint.paused_until

    # The existing pause alert says why, once.
    now = timezone.now()
    paused_alerts = [a for a in detect_changes(now=now) if a.kind == AlertKind.PAUSED]
    assert len(paused_alerts) == 1
    assert "Breaker: a failure a person must fix" in paused_alerts[0].detail
    assert not [a for a in detect_changes(now=now) if a.kind == AlertKind.PAUSED]


def test_the_breaker_opens_after_n_failed_slots_and_its_cooldown_probe_closes_it(
    scheduler, job, make_endpoint, target
):
    policy_job(job, breaker_failed_slots=2, breaker_cooldown_ms=2_000)
    target.reply("/bad", status=500)
    endpoint = make_endpoint(
        url=target.url("/bad"), baseline_interval_ms=1_000, next_run_at=timezone.now()
    )

    assert tick_until(
        scheduler,
        lambda: Endpoint.objects.filter(pk=endpoint.pk, paused_until__isnull=False).exists(),
        timeout=20,
    )
    endpoint.refresh_from_db()
    assert endpoint.pause_reason.startswith("Breaker: 2 failed slots in a row")
    assert "a probe run after 2 seconds" in endpoint.pause_reason
    target.reply("/bad", status=200)

    assert tick_until(
        scheduler, lambda: Run.objects.filter(endpoint=endpoint, status="success").exists(), 20
    )
    endpoint.refresh_from_db()
    assert endpoint.failure_count == 0  # the probe succeeded: closed again


def test_200_with_status_error_fails_a_body_check_in_words(scheduler, job, make_endpoint, target):
    policy_job(job, body_json_path="status", body_json_equals="ok")
    target.reply("/status", status=200, body={"status": "error"})
    endpoint = make_endpoint(url=target.url("/status"), next_run_at=timezone.now())

    assert tick_until(scheduler, finished(endpoint, 1), timeout=20)

    [run] = runs(endpoint)
    assert (run.status, run.status_code) == (RunStatus.FAILURE, 200)
    assert run.error == 'status is "error", expected "ok"'
    endpoint.refresh_from_db()
    assert endpoint.failure_count == 1


def test_expected_status_may_accept_a_non_2xx_answer(scheduler, job, make_endpoint, target):
    target.reply("/gone", status=404)
    endpoint = make_endpoint(
        url=target.url("/gone"), next_run_at=timezone.now(), run_policy={"expected_status": [404]}
    )

    assert tick_until(scheduler, finished(endpoint, 1), timeout=20)

    [run] = runs(endpoint)
    assert (run.status, run.status_code, run.error) == (RunStatus.SUCCESS, 404, "")


def test_a_slow_answer_fails_the_maximum_duration(scheduler, job, make_endpoint, target):
    policy_job(job, max_duration_ms=300)
    target.reply("/slow", delay=0.8)
    endpoint = make_endpoint(url=target.url("/slow"), next_run_at=timezone.now())

    assert tick_until(scheduler, finished(endpoint, 1), timeout=20)

    [run] = runs(endpoint)
    assert run.status == RunStatus.FAILURE
    assert "more than the maximum duration of 300 ms" in run.error


def test_a_run_found_later_than_the_catchup_window_is_skipped_and_recorded(
    scheduler, job, make_endpoint, target
):
    policy_job(job, catchup_window_ms=60_000)
    missed = timezone.now() - timedelta(hours=6)
    endpoint = make_endpoint(
        url=target.url("/report"), baseline_cron=daily_cron_far_from_now(), next_run_at=missed
    )

    assert tick_until(scheduler, finished(endpoint, 1), timeout=20)

    [run] = runs(endpoint)
    assert run.status == RunStatus.SKIPPED
    assert run.scheduled_for == missed
    assert run.error.startswith("Skipped: found 6 hours late")
    assert "catch-up window (1 minute)" in run.error
    assert target.hits("/report") == []  # never called
    endpoint.refresh_from_db()
    assert endpoint.failure_count == 0
    assert endpoint.next_run_at > timezone.now()  # the next daily instant


def test_without_a_catchup_window_a_late_run_still_runs_once(scheduler, job, make_endpoint, target):
    endpoint = make_endpoint(
        url=target.url("/report"),
        baseline_cron=daily_cron_far_from_now(),
        next_run_at=timezone.now() - timedelta(hours=6),
    )

    assert tick_until(scheduler, finished(endpoint, 1), timeout=20)

    assert [run.status for run in runs(endpoint)] == [RunStatus.SUCCESS]
    assert len(target.hits("/report")) == 1


def test_policies_are_validated_with_the_key_and_the_fix(job, make_endpoint):
    job.run_policy = {"retry_attempts": 0, "jitter": 5, "retry_backoff": "linear"}
    with pytest.raises(ValidationError) as caught:
        job.full_clean()
    messages = caught.value.message_dict["run_policy"]
    assert any(m.startswith("retry_attempts: must be between 1 and 10") for m in messages)
    assert any(m.startswith("jitter: not a policy key") for m in messages)
    assert any("retry_backoff" in m and '"fixed"' in m for m in messages)

    with pytest.raises(ValidationError) as caught:
        make_endpoint(run_policy={"expected_status": ["2xy"], "body_json_equals": 1})
    assert "run_policy" in caught.value.message_dict
    with pytest.raises(ValidationError):
        make_endpoint(run_policy=["retry_attempts"])


def test_a_policy_is_resolved_once_for_a_batch_of_runs_not_once_per_use(
    scheduler, job, make_endpoint, target, monkeypatch
):
    """The engine reads each endpoint's policy where it loads it (``stored_policy``), by
    the version the database gives: five endpoints sharing their job's policy, run and
    rescheduled, parse it once; explained after (by content), once more; an edit, once
    more (issue 32: 3-4 times per run)."""
    calls = []
    resolve = policies.resolve_policy
    monkeypatch.setattr(
        policies, "resolve_policy", lambda *both: calls.append(both) or resolve(*both)
    )
    policies._RESOLVED.clear()
    policy_job(job, retry_attempts=2, blackout=[{"start": "00:00", "end": "00:01"}])
    endpoints = [
        make_endpoint(
            url=target.url("/ok"), baseline_interval_ms=DAY_MS, next_run_at=timezone.now()
        )
        for _ in range(5)
    ]
    calls.clear()  # the validation of the job's and endpoints' saves

    assert tick_until(scheduler, lambda: all(finished(e, 1)() for e in endpoints), timeout=20)
    assert len(calls) == 1
    for endpoint in endpoints:
        endpoint.refresh_from_db()
        assert explain_plan(timezone.now(), operations.held_schedule(endpoint))
    assert len(calls) == 2

    policy_job(job, retry_attempts=3)
    calls.clear()
    assert [Endpoint.objects.get(pk=e.pk).policy.retry_attempts for e in endpoints] == [3] * 5
    assert len(calls) == 1


def test_the_engine_reads_a_policy_only_for_a_version_its_process_has_not_met(
    job, make_endpoint, monkeypatch
):
    """The database keeps each run policy's version (a digest that every write changes,
    an ORM ``update`` or raw SQL as much as a save): reading claimed endpoints reads the
    policies' text only for a version this process has not resolved, so the batch of an
    endpoint with the largest policy reads two digests, not the policies (issue 32)."""
    statements: list[str] = []
    fetch = sql.fetch
    monkeypatch.setattr(
        sql, "fetch", lambda text, *a, **k: statements.append(text) or fetch(text, *a, **k)
    )
    policies._RESOLVED.clear()
    policy_job(job, retry_attempts=2)
    endpoint = make_endpoint(run_policy={"max_duration_ms": 5000}, baseline_interval_ms=DAY_MS)

    def loaded() -> policies.RunPolicy:
        statements.clear()
        return sql.load_endpoints([endpoint.pk])[endpoint.pk].policy

    assert (loaded().retry_attempts, loaded().max_duration_ms) == (2, 5000)
    assert len(statements) == 1 and "run_policy AS text" not in statements[0]

    Job.objects.filter(pk=job.pk).update(run_policy={"retry_attempts": 4})
    assert loaded().retry_attempts == 4
    assert len(statements) == 2 and "CAST(j.run_policy AS text)" in statements[1]
    assert loaded().retry_attempts == 4 and len(statements) == 1

    Endpoint.objects.filter(pk=endpoint.pk).update(run_policy={})
    assert loaded() == policies.resolve_policy({"retry_attempts": 4}, {})
