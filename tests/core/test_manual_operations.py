"""Manual operations: run now, test, pause/resume, hints, reset failures, archive, jobs."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from endpoints.audit import Actor
from endpoints.engine.claiming import claim_due_endpoints
from endpoints.engine.running import execute_claim
from endpoints.models import (
    Endpoint,
    HintHistory,
    HintKind,
    Job,
    JobStatus,
    Run,
    RunStatus,
    RunTrigger,
    Source,
)
from endpoints.operations import (
    OperationRefused,
    apply_hint,
    archive_endpoint,
    clear_hints,
    pause_endpoint,
    pause_job,
    recompute_next_run,
    reset_failures,
    resume_endpoint,
    resume_job,
    run_now,
    test_endpoint,
)

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("loopback_allowed")]

S = timedelta(seconds=1)
HOUR = timedelta(hours=1)


@pytest.fixture
def user(db):
    return get_user_model().objects.create_user("ada", password="x")


def fresh(endpoint: Endpoint) -> Endpoint:
    endpoint.refresh_from_db()
    return endpoint


def test_recompute_plans_an_interval_endpoint_from_now(make_endpoint, now):
    endpoint = make_endpoint(baseline_interval_ms=300_000)
    plan = recompute_next_run(endpoint, now=now)
    assert (plan.next_run_at, plan.source) == (now + 5 * 60 * S, Source.BASELINE_INTERVAL)
    assert fresh(endpoint).next_run_at == now + 5 * 60 * S


def test_recompute_plans_a_cron_endpoint_at_its_next_occurrence(make_endpoint, now):
    endpoint = make_endpoint(baseline_cron="30 * * * *")
    recompute_next_run(endpoint, now=now)
    assert fresh(endpoint).next_run_at == now.replace(minute=30)
    assert endpoint.next_run_source == Source.BASELINE_CRON


def test_run_now_makes_the_endpoint_due_and_the_run_is_a_manual_one(make_endpoint, target):
    endpoint = make_endpoint(url=target.url("/"), next_run_at=timezone.now() + HOUR)
    now = timezone.now()
    run_now(endpoint, now=now)
    assert (fresh(endpoint).next_run_at, endpoint.next_run_source) == (now, Source.MANUAL)

    [claim] = claim_due_endpoints(now=timezone.now(), limit=10, horizon_ms=0)
    run = execute_claim(claim)

    assert (run.trigger, run.source, run.scheduled_for) == (RunTrigger.MANUAL, "manual", now)
    assert fresh(endpoint).next_run_source == Source.BASELINE_INTERVAL
    assert endpoint.next_run_at == run.started_at + 60 * S


def test_run_now_is_refused_while_a_run_is_in_flight_and_says_which(make_endpoint, now):
    endpoint = make_endpoint(next_run_at=now)
    [claim] = claim_due_endpoints(now=now, limit=10, horizon_ms=0)
    with pytest.raises(OperationRefused, match="claimed and about to run"):
        run_now(endpoint, now=now)
    run = Run.objects.create(
        endpoint=endpoint, scheduled_for=now, started_at=now, claim_token=claim.claim_token
    )
    with pytest.raises(OperationRefused) as refused:
        run_now(endpoint, now=now + 4 * S)
    assert str(refused.value) == (
        f"ops/{endpoint.name} is running now (run {run.pk} started 4 seconds ago); "
        "wait for it to finish."
    )
    assert fresh(endpoint).next_run_source != Source.MANUAL


def test_run_now_is_not_blocked_by_a_lease_that_ran_out(make_endpoint, now):
    endpoint = make_endpoint(next_run_at=now - HOUR)
    claim_due_endpoints(now=now - HOUR, limit=10, horizon_ms=0)
    run_now(endpoint, now=now)  # the worker died an hour ago; its lease is long over
    [claim] = claim_due_endpoints(now=now, limit=10, horizon_ms=0)
    assert (claim.endpoint_id, claim.trigger, claim.scheduled_for) == (endpoint.pk, "manual", now)


def test_run_now_is_refused_for_a_paused_endpoint_a_paused_job_and_an_archived_endpoint(
    make_endpoint, job, now
):
    paused = make_endpoint(paused_until=now + HOUR)
    with pytest.raises(OperationRefused, match=r"is paused until .* resume it first"):
        run_now(paused, now=now)
    archived = make_endpoint(archived_at=now)
    with pytest.raises(OperationRefused, match="archived"):
        run_now(archived, now=now)
    pause_job(job, now=now)
    active = make_endpoint()
    with pytest.raises(OperationRefused, match="Job ops is paused; resume the job first"):
        run_now(active, now=now)


def test_a_test_request_records_a_test_run_and_leaves_the_schedule_alone(
    make_endpoint, target, now
):
    target.reply("/probe", body={"status": "healthy"})
    endpoint = make_endpoint(
        url=target.url("/probe"),
        next_run_at=now + HOUR,
        next_run_source=Source.BASELINE_INTERVAL,
        failure_count=2,
        paused_until=now + HOUR,
    )
    run = test_endpoint(endpoint)
    assert (run.trigger, run.status, run.status_code) == (RunTrigger.TEST, RunStatus.SUCCESS, 200)
    assert run.response_body == {"status": "healthy"}
    fresh(endpoint)
    assert (endpoint.next_run_at, endpoint.failure_count) == (now + HOUR, 2)
    assert endpoint.last_run_at is None
    assert len(target.hits("/probe")) == 1


def test_a_test_request_on_an_archived_endpoint_is_refused(make_endpoint, now):
    with pytest.raises(OperationRefused, match="archived"):
        test_endpoint(make_endpoint(archived_at=now))


def test_pausing_moves_the_next_run_to_the_end_of_the_pause_and_records_who(
    make_endpoint, user, now
):
    endpoint = make_endpoint(next_run_at=now + S)
    entry = pause_endpoint(
        endpoint, now=now, until=now + HOUR, reason="deploy", actor=Actor.person(user)
    )
    fresh(endpoint)
    assert (endpoint.paused_until, endpoint.pause_reason) == (now + HOUR, "deploy")
    assert (endpoint.next_run_at, endpoint.next_run_source) == (now + HOUR, Source.PAUSED)
    assert (entry.kind, entry.paused_until, entry.created_by) == (HintKind.PAUSE, now + HOUR, user)
    assert claim_due_endpoints(now=now + 2 * S, limit=10, horizon_ms=0) == []


def test_pausing_until_a_past_time_is_refused(make_endpoint, now):
    with pytest.raises(OperationRefused, match="not in the future"):
        pause_endpoint(make_endpoint(), now=now, until=now - S)


def test_resuming_plans_from_the_baseline_at_once(make_endpoint, now):
    endpoint = make_endpoint(paused_until=now + HOUR, next_run_at=now + HOUR)
    entry = resume_endpoint(endpoint, now=now, reason="done")
    fresh(endpoint)
    assert endpoint.paused_until is None
    assert (endpoint.next_run_at, endpoint.next_run_source) == (
        now + 60 * S,
        Source.BASELINE_INTERVAL,
    )
    assert (entry.kind, entry.reason) == (HintKind.RESUME, "done")
    assert pause_endpoint(endpoint, now=now, until=None).kind == HintKind.RESUME


def test_a_tighter_interval_hint_brings_the_next_run_forward_at_once(make_endpoint, user, now):
    endpoint = make_endpoint(baseline_interval_ms=600_000, next_run_at=now + 500 * S)
    entry = apply_hint(
        endpoint,
        now=now,
        interval_ms=30_000,
        ttl=HOUR,
        reason="queue growing",
        actor=Actor.person(user),
    )
    fresh(endpoint)
    assert (endpoint.next_run_at, endpoint.next_run_source) == (now + 30 * S, Source.AI_INTERVAL)
    assert (endpoint.ai_hint_interval_ms, endpoint.ai_hint_expires_at) == (30_000, now + HOUR)
    assert endpoint.ai_hint_reason == "queue growing"
    assert (entry.kind, entry.interval_ms, entry.expires_at) == (
        HintKind.INTERVAL,
        30_000,
        now + HOUR,
    )


def test_a_looser_interval_hint_never_pushes_a_planned_run_back(make_endpoint, now):
    endpoint = make_endpoint(baseline_interval_ms=60_000, next_run_at=now + 20 * S)
    apply_hint(endpoint, now=now, interval_ms=3_600_000, ttl=HOUR, reason="quiet")
    fresh(endpoint)
    assert endpoint.next_run_at == now + 20 * S
    assert endpoint.ai_hint_interval_ms == 3_600_000


def test_a_one_shot_hint_sets_the_next_run_when_earlier(make_endpoint, now):
    endpoint = make_endpoint(baseline_interval_ms=600_000, next_run_at=now + 500 * S)
    entry = apply_hint(endpoint, now=now, next_run_at=now + 90 * S, ttl=HOUR, reason="at 12:01:30")
    fresh(endpoint)
    assert (endpoint.next_run_at, endpoint.next_run_source) == (now + 90 * S, Source.AI_ONESHOT)
    assert (entry.kind, entry.next_run_at) == (HintKind.ONESHOT, now + 90 * S)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "exactly one of"),
        ({"interval_ms": 5_000, "next_run_at": "now"}, "exactly one of"),
        ({"interval_ms": 500}, "at least 1000 ms"),
        ({"interval_ms": 5_000, "ttl": timedelta(0)}, "positive time to live"),
    ],
)
def test_a_malformed_hint_is_refused_with_what_to_fix(make_endpoint, now, kwargs, message):
    endpoint = make_endpoint()
    arguments = {"ttl": HOUR, "reason": "x", **kwargs}
    if arguments.get("next_run_at") == "now":
        arguments["next_run_at"] = now
    with pytest.raises(OperationRefused, match=message):
        apply_hint(endpoint, now=now, **arguments)
    assert not HintHistory.objects.exists()


def test_clearing_hints_cancels_a_pending_one_shot_and_plans_from_the_baseline(make_endpoint, now):
    endpoint = make_endpoint(baseline_interval_ms=600_000, next_run_at=now + 500 * S)
    apply_hint(endpoint, now=now, next_run_at=now + 60 * S, ttl=HOUR, reason="soon")
    entry = clear_hints(endpoint, now=now + S, reason="never mind")
    fresh(endpoint)
    assert endpoint.ai_hint_next_run_at is None and endpoint.ai_hint_expires_at is None
    assert (endpoint.next_run_at, endpoint.next_run_source) == (
        now + S + 600 * S,
        Source.BASELINE_INTERVAL,
    )
    assert (entry.kind, entry.reason) == (HintKind.CLEAR, "never mind")


def test_resetting_failures_drops_the_backoff_from_the_next_run(make_endpoint, now):
    endpoint = make_endpoint(baseline_interval_ms=60_000, failure_count=5, next_run_at=now + HOUR)
    reset_failures(endpoint, now=now)
    fresh(endpoint)
    assert (endpoint.failure_count, endpoint.next_run_at) == (0, now + 60 * S)


def test_an_archived_endpoint_is_no_longer_claimed(make_endpoint, now):
    endpoint = make_endpoint(next_run_at=now)
    archive_endpoint(endpoint, now=now)
    assert fresh(endpoint).archived_at == now
    assert claim_due_endpoints(now=now, limit=10, horizon_ms=0) == []


def test_a_paused_job_is_not_claimed_and_resuming_it_plans_its_endpoints_afresh(
    make_endpoint, job, now
):
    endpoint = make_endpoint(next_run_at=now - HOUR)
    pause_job(job, now=now)
    assert Job.objects.get(pk=job.pk).status == JobStatus.PAUSED
    assert claim_due_endpoints(now=now, limit=10, horizon_ms=0) == []
    resume_job(job, now=now)
    assert fresh(endpoint).next_run_at == now + 60 * S
    assert [c.endpoint_id for c in claim_due_endpoints(now=now + 60 * S, limit=10, horizon_ms=0)]
