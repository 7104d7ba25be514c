"""Run policies end to end through the Celery fleet: celery beat, a worker on the tick,
maintenance and notify queues and a threads worker on the execute queue, over Redis and
PostgreSQL, against a real HTTP target on 127.0.0.1 whose answers are switched during the
test. The same cases as ``test_run_policies.py`` (``runscheduler``'s loops), counted at
the target; the fleet is started once for the module."""

from __future__ import annotations

import io
import json
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from itertools import pairwise

import pytest
from django.core.management import call_command
from django.utils import timezone

from endpoints.models import Endpoint, Job, JobStatus, Run, RunStatus, RunTrigger, Slot
from endpoints.operations import recompute_next_run
from endpoints.policies import jitter_offset_ms
from notifications.alerts import detect_changes
from notifications.models import Channel, ChannelKind, Delivery, DeliveryStatus
from tests import fleets
from tests.engine_processes import (
    wait_until,
)
from tests.faults.analysis import Execution, most_at_once
from tests.fleets import Fleet
from tests.planning import (
    DAY_MS,
    daily_cron_far_from_now,
    finished,
    planned_after,
    policy_job,
    runs,
)

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

S = timedelta(seconds=1)
FLEET = 1_000
JITTER_MS = 30_000


@pytest.fixture(scope="module")
def celery_fleet(
    django_db_setup: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Fleet]:
    """The fleet for the module, with the notify queue and the alert cycle every half
    second."""
    logs = tmp_path_factory.mktemp("policy-fleet")
    with fleets.celery_fleet(
        logs,
        tick_queues=("tick", "maintenance", "notify"),
        CRONICORN_NOTIFY_SECONDS="0.5",
        CRONICORN_ALERT_DIGEST_SECONDS="1",
    ) as fleet:
        yield fleet


@pytest.fixture
def fleet(celery_fleet: Fleet, transactional_db: None) -> Iterator[Fleet]:
    yield from fleets.ticking_into_this_test(celery_fleet)


def test_a_daily_endpoint_with_one_transient_503_succeeds_on_its_retry(
    fleet, job, make_endpoint, target
):
    policy_job(job, retry_attempts=3, retry_delay_ms=1_000)
    target.reply("/flaky", status=503, action=lambda: target.reply("/flaky", status=200))
    endpoint = make_endpoint(
        url=target.url("/flaky"), baseline_interval_ms=DAY_MS, next_run_at=timezone.now()
    )

    assert wait_until(finished(endpoint, 2), timeout=30), fleet.tail()

    assert len(target.hits("/flaky")) == 2
    first, second = runs(endpoint)
    assert (first.status, first.status_code, first.attempt) == (RunStatus.FAILURE, 503, 1)
    assert (second.status, second.attempt, second.retry_of_id) == (RunStatus.SUCCESS, 2, first.pk)
    assert second.trigger == RunTrigger.SCHEDULED and second.source == "retry"
    # The retry's slot is the policy's delay after the failed attempt ended, not a day.
    assert second.scheduled_for == first.finished_at + S
    assert second.started_at >= second.scheduled_for
    endpoint.refresh_from_db()
    assert (endpoint.failure_count, endpoint.retry_attempt, endpoint.retry_of_run) == (0, 0, None)
    assert endpoint.next_run_at == planned_after(second, timedelta(days=1))


def test_a_401_is_not_retried_and_trips_the_breaker_with_one_alert(
    fleet, job, make_endpoint, target
):
    policy_job(job, retry_attempts=3, retry_delay_ms=1_000, breaker_needs_person=True)
    Channel.objects.create(
        tenant=job.tenant, name="hook", kind=ChannelKind.WEBHOOK, target=target.url("/hook")
    )
    target.reply("/locked", status=401)
    endpoint = make_endpoint(url=target.url("/locked"), next_run_at=timezone.now())
    paused = Endpoint.objects.filter(pk=endpoint.pk, paused_until__isnull=False)

    assert wait_until(paused.exists, timeout=30), fleet.tail()
    assert wait_until(lambda: len(target.hits("/hook")) >= 1, timeout=30), fleet.tail()
    sent = Delivery.objects.filter(status=DeliveryStatus.SENT)
    assert wait_until(lambda: sent.count() >= 1, timeout=10), fleet.tail()

    assert len(target.hits("/locked")) == 1  # not retried
    endpoint.refresh_from_db()
    assert endpoint.pause_reason.startswith("Breaker: a failure a person must fix")
    assert "401" in endpoint.pause_reason
    assert Slot.objects.get(pk=endpoint.pk).next_run_at == endpoint.paused_until
    [hook] = target.hits("/hook")
    [alert] = json.loads(hook.body)["alerts"]
    assert alert["event"] == "paused"
    assert "Breaker: a failure a person must fix" in alert["detail"]
    # The pause is told once: a further cycle finds nothing new, and nothing else was sent.
    assert detect_changes(now=timezone.now()) == []
    assert list(Delivery.objects.values_list("status", flat=True)) == [DeliveryStatus.SENT]
    assert len(target.hits("/hook")) == 1


def test_200_with_status_error_fails_a_body_check_in_words(fleet, job, make_endpoint, target):
    policy_job(job, body_json_path="status", body_json_equals="ok")
    target.reply("/status", status=200, body={"status": "error"})
    endpoint = make_endpoint(url=target.url("/status"), next_run_at=timezone.now())

    assert wait_until(finished(endpoint, 1), timeout=30), fleet.tail()

    run = runs(endpoint)[0]
    assert (run.status, run.status_code) == (RunStatus.FAILURE, 200)
    assert run.error == 'status is "error", expected "ok"'
    assert len(target.hits("/status")) >= 1


def test_a_slow_answer_fails_the_maximum_duration(fleet, job, make_endpoint, target):
    policy_job(job, max_duration_ms=300)
    target.reply("/slow", delay=0.8)
    endpoint = make_endpoint(url=target.url("/slow"), next_run_at=timezone.now())

    assert wait_until(finished(endpoint, 1), timeout=30), fleet.tail()

    run = runs(endpoint)[0]
    assert (run.status, run.status_code) == (RunStatus.FAILURE, 200)
    assert "more than the maximum duration of 300 ms" in run.error


def test_a_run_found_later_than_the_catchup_window_is_skipped_and_recorded(
    fleet, job, make_endpoint, target
):
    policy_job(job, catchup_window_ms=60_000)
    missed = timezone.now() - timedelta(hours=6)
    endpoint = make_endpoint(
        url=target.url("/report"), baseline_cron=daily_cron_far_from_now(), next_run_at=missed
    )

    assert wait_until(finished(endpoint, 1), timeout=30), fleet.tail()

    [run] = runs(endpoint)
    assert (run.status, run.scheduled_for) == (RunStatus.SKIPPED, missed)
    assert run.error.startswith("Skipped: found 6 hours late")
    assert target.hits("/report") == []  # never called
    endpoint.refresh_from_db()
    assert endpoint.failure_count == 0
    assert endpoint.next_run_at > timezone.now()  # the next daily instant


def test_a_blackout_window_moves_the_runs_and_explain_says_so(fleet, job, make_endpoint, target):
    endpoint = make_endpoint(
        url=target.url("/tick"), baseline_interval_ms=1_000, next_run_at=timezone.now()
    )
    ok = Run.objects.filter(endpoint=endpoint, status=RunStatus.SUCCESS)
    assert wait_until(lambda: ok.count() >= 2, timeout=30), fleet.tail()

    # A window from this minute (UTC, the endpoint's zone) to two minutes on, set while
    # the fleet runs the endpoint every second: its next plan lands on the window's end.
    opens = timezone.now().replace(second=0, microsecond=0)
    closes = opens + timedelta(minutes=2)
    policy_job(job, blackout=[{"start": f"{opens:%H:%M}", "end": f"{closes:%H:%M}"}])
    moved = Slot.objects.filter(pk=endpoint.pk, next_run_source="window", claim_token__isnull=True)
    assert wait_until(moved.exists, timeout=30), fleet.tail()

    assert moved.get().next_run_at == closes
    last = Run.objects.filter(endpoint=endpoint).order_by("-started_at").first()
    assert last is not None and last.status == RunStatus.SUCCESS
    # Nothing ran after the plan moved: every call at the target has its run.
    assert len(target.hits("/tick")) == Run.objects.filter(endpoint=endpoint).count()
    out = io.StringIO()
    call_command("explain", str(endpoint.pk), stdout=out)
    window = f"{opens:%H:%M}-{closes:%H:%M} daily (UTC)"
    assert f"inside the blackout window {window}" in out.getvalue(), out.getvalue()
    assert (
        "set by a time window (blackout, allowed hours or active period) (window)" in out.getvalue()
    )


def test_a_thousand_endpoints_on_one_cron_instant_spread_over_the_jitter_once_each(
    fleet, job, target
):
    policy_job(job, jitter_ms=JITTER_MS)
    endpoints = Endpoint.objects.bulk_create(
        Endpoint(job=job, name=f"j{k}", url=target.url(f"/j{k}"), baseline_cron="* * * * *")
        for k in range(FLEET)
    )
    # Planned at a moment past the half minute, every endpoint's slot is the next minute
    # (this minute's slot plus at most 30 s has passed): one cron instant for all.
    assert wait_until(lambda: 31 <= timezone.now().second <= 50, timeout=61)
    planned_at = timezone.now()
    instant = planned_at.replace(second=0, microsecond=0) + timedelta(minutes=1)
    for endpoint in endpoints:
        recompute_next_run(endpoint, now=planned_at)
    offsets = {e.pk: timedelta(milliseconds=jitter_offset_ms(e.pk, JITTER_MS)) for e in endpoints}
    assert {e.next_run_at - offsets[e.pk] for e in endpoints} == {instant}

    in_slot = Run.objects.filter(
        endpoint__job=job, scheduled_for__lt=instant + timedelta(minutes=1)
    )
    done = in_slot.exclude(status=RunStatus.RUNNING)
    assert wait_until(lambda: done.count() >= FLEET, timeout=150), fleet.tail()

    arrivals = [
        hit for hit in target.hits() if hit.at < (instant + timedelta(minutes=1)).timestamp()
    ]
    per_second = Counter(int(hit.at - instant.timestamp()) for hit in arrivals)
    print(f"\n{FLEET} endpoints, cron * * * * *, jitter {JITTER_MS} ms; calls per second:")
    for second in range(min(per_second), max(per_second) + 1):
        print(f"  +{second:2d} s {per_second[second]:4d} {'#' * (per_second[second] // 2)}")

    # Each endpoint ran once in the slot, at its own offset, never before it.
    slot_runs = {run.endpoint_id: run for run in in_slot}
    assert len(slot_runs) == in_slot.count() == FLEET
    assert {run.status for run in slot_runs.values()} == {RunStatus.SUCCESS}
    for endpoint in endpoints:
        run = slot_runs[endpoint.pk]
        assert run.scheduled_for == instant + offsets[endpoint.pk]
        assert run.started_at >= run.scheduled_for
    calls = Counter(hit.path for hit in arrivals)
    assert set(calls.values()) == {1} and len(calls) == FLEET
    by_path = {f"/j{k}": e for k, e in enumerate(endpoints)}
    assert all(
        hit.at >= slot_runs[by_path[hit.path].pk].scheduled_for.timestamp() for hit in arrivals
    )
    # Spread: the offsets cover the 30 s and no second holds a third of the calls.
    spread = max(offsets.values()) - min(offsets.values())
    assert spread > timedelta(seconds=29)
    assert max(per_second.values()) < FLEET / 3, per_second
    # The next slots are later minutes at the same offsets (slot + offset, each time).
    nexts = dict(Slot.objects.filter(endpoint__job=job).values_list("pk", "next_run_at"))
    for endpoint in endpoints:
        slot = nexts[endpoint.pk] - offsets[endpoint.pk]
        assert slot > instant and slot.second == slot.microsecond == 0, (endpoint.pk, slot)


def test_overlap_skip_records_the_slots_due_in_flight_and_never_calls_them(
    fleet, job, make_endpoint, target
):
    """Issue 34: a 1 s endpoint whose call takes 2.5 s under ``overlap: skip``."""
    policy_job(job, overlap="skip")
    target.reply("/slow", delay=2.5)
    endpoint = make_endpoint(
        url=target.url("/slow"), baseline_interval_ms=1_000, next_run_at=timezone.now()
    )

    assert wait_until(lambda: len(target.hits("/slow")) >= 3, timeout=60), fleet.tail()
    Job.objects.filter(pk=job.pk).update(status=JobStatus.PAUSED)
    assert wait_until(
        lambda: not Run.objects.filter(endpoint=endpoint, status=RunStatus.RUNNING).exists(),
        timeout=30,
    ), fleet.tail()

    every = runs(endpoint)
    called = [run for run in every if run.status != RunStatus.SKIPPED]
    skipped = [run for run in every if run.status == RunStatus.SKIPPED]
    hits = target.hits("/slow")
    # Counted at the target: one call per run that was not skipped, none of a skipped one.
    assert len(hits) == len(called) >= 3
    assert {hit.headers["X-Cronicorn-Run-Id"] for hit in hits} == {str(r.pk) for r in called}
    assert len(skipped) >= 2 * (len(called) - 1)  # ~2 slots pass during each 2.5 s call
    assert all("overlap: skip" in run.error and "still in flight" in run.error for run in skipped)
    # One call in flight at a time, and each slot at most once.
    spans = sorted((hit.at, hit.finished) for hit in hits)
    assert all(end is not None and end <= start for (_, end), (start, _) in pairwise(spans))
    slots = [run.scheduled_for for run in every if run.trigger == RunTrigger.SCHEDULED]
    assert len(slots) == len(set(slots))
    # Every skipped slot lies inside the call before it.
    for run in skipped:
        before = max(
            (c for c in called if c.started_at <= run.scheduled_for), key=lambda c: c.started_at
        )
        assert before.started_at < run.scheduled_for <= before.finished_at


def test_overlap_allow_3_runs_each_slot_on_time_beside_the_calls_in_flight_once(
    fleet, job, make_endpoint, target
):
    """Issue 34: the same 1 s endpoint whose call takes 2.5 s under ``overlap: {"allow": 3}``:
    every slot starts on time beside the calls still in flight, never more than three of
    them at once at the target, each slot called once."""
    policy_job(job, overlap={"allow": 3})
    target.reply("/slow", delay=2.5)
    endpoint = make_endpoint(
        url=target.url("/slow"), baseline_interval_ms=1_000, next_run_at=timezone.now()
    )

    assert wait_until(lambda: len(target.hits("/slow")) >= 8, timeout=60), fleet.tail()
    Job.objects.filter(pk=job.pk).update(status=JobStatus.PAUSED)
    assert wait_until(
        lambda: not Run.objects.filter(endpoint=endpoint, status=RunStatus.RUNNING).exists(),
        timeout=30,
    ), fleet.tail()

    every = runs(endpoint)
    hits = target.hits("/slow")
    # Counted at the target: one call per run, each run's own, each slot once.
    assert len(hits) == len(every) >= 8
    assert sorted(hit.headers["X-Cronicorn-Run-Id"] for hit in hits) == sorted(
        str(run.pk) for run in every
    )
    slots = sorted(run.scheduled_for for run in every)
    assert len(slots) == len(set(slots))
    assert {run.status for run in every} == {RunStatus.SUCCESS}
    # Side by side, never more than three at once (an end and an arrival at one instant
    # are not beside each other).
    calls = [Execution("slow", hit.at, hit.finished) for hit in hits]
    assert 2 <= most_at_once(calls)["slow"] <= 3
    # On time: the slots follow one another a second apart, each planned from the slot
    # before it rather than from its call's end (under ``wait`` they would be 2.5 s
    # apart), and each call arrived while the one before it was still in flight.
    gaps = [later - earlier for earlier, later in pairwise(slots)]
    assert gaps.count(S) >= 0.8 * len(gaps), gaps
    by_slot = {run.scheduled_for: run for run in every}
    spans = {hit.headers["X-Cronicorn-Run-Id"]: (hit.at, hit.finished) for hit in hits}
    for earlier, later in pairwise(slots):
        if later - earlier == S:
            (_, first_end), (then, _) = (
                spans[str(by_slot[earlier].pk)],
                spans[str(by_slot[later].pk)],
            )
            assert first_end is not None and then < first_end
    # The outcomes wrote the endpoint's failure count, never its slot: the slot's next
    # run is after the last slot that started, not back at an earlier call's end.
    endpoint.refresh_from_db()
    assert endpoint.failure_count == 0
    next_run_at = Slot.objects.get(pk=endpoint.pk).next_run_at
    assert next_run_at is not None and next_run_at > slots[-1]
