"""Which slots a backfill holds and which it runs (``plan_backfill``, the dry run): cron in
its time zone across daylight saving time, an interval on its phase, the run policy's
windows and active period, a job's endpoints; a slot that succeeded (itself or by a
retry) or is the scheduler's next run is left alone, a failed one is run."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from endpoints.backfill import plan_backfill, slots_between
from endpoints.models import Endpoint, Run, RunStatus, RunTrigger, Slot
from tests.backfill.slots import CRON, the_range
from tests.planning import policy_job

pytestmark = pytest.mark.django_db
NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def run_of(endpoint: Endpoint, when: datetime, status: str, **fields) -> Run:
    return Run.objects.create(
        endpoint=endpoint,
        trigger=fields.pop("trigger", RunTrigger.SCHEDULED),
        scheduled_for=when,
        started_at=when,
        finished_at=when + timedelta(seconds=1),
        status=status,
        **fields,
    )


def test_cron_slots_follow_the_time_zone_across_daylight_saving_time(make_endpoint):
    endpoint = make_endpoint(baseline_cron="30 2 * * *", timezone="America/New_York")
    # 2026-03-08: 02:30 does not exist in New York; it runs once, at 03:00 EDT (07:00 UTC).
    slots = slots_between(endpoint, at("2026-03-07T00:00"), at("2026-03-10T00:00"))
    assert slots == [at("2026-03-07T07:30"), at("2026-03-08T07:00"), at("2026-03-09T06:30")]
    fold = make_endpoint(baseline_cron="30 1 * * *", timezone="America/New_York")
    # 2026-11-01: 01:30 happens twice; it runs once, at its first pass (05:30 UTC).
    slots = slots_between(fold, at("2026-10-31T12:00"), at("2026-11-02T12:00"))
    assert slots == [at("2026-11-01T05:30"), at("2026-11-02T06:30")]


def test_interval_slots_keep_the_phase_of_the_last_scheduled_run(make_endpoint):
    endpoint = make_endpoint(baseline_interval_ms=600_000)
    run_of(endpoint, at("2026-11-22T09:03:07"), RunStatus.SUCCESS)
    slots = slots_between(endpoint, at("2026-11-22T08:00"), at("2026-11-22T09:00"))
    assert [s.strftime("%H:%M:%S") for s in slots] == [
        "08:03:07", "08:13:07", "08:23:07", "08:33:07", "08:43:07", "08:53:07"
    ]  # fmt: skip


def test_the_run_policy_removes_slots_outside_its_windows_and_active_period(job, make_endpoint):
    policy_job(
        job,
        blackout=[{"days": ["sun"], "start": "03:00", "end": "04:00"}],
        active_from="2026-11-22T01:00:00Z",
    )
    endpoint = make_endpoint(baseline_cron="0 * * * *")
    slots = slots_between(endpoint, at("2026-11-22T00:00"), at("2026-11-22T06:00"))
    assert [s.hour for s in slots] == [1, 2, 4, 5]  # 00:00 before it is active, 03:00 blacked out


def test_a_slot_that_succeeded_even_by_a_retry_is_left_and_a_failed_one_is_run(make_endpoint):
    endpoint = make_endpoint(baseline_cron="0 * * * *")
    run_of(endpoint, at("2026-11-22T01:00"), RunStatus.SUCCESS)
    failed = run_of(endpoint, at("2026-11-22T02:00"), RunStatus.FAILURE)
    run_of(
        endpoint,
        at("2026-11-22T02:00:10"),
        RunStatus.SUCCESS,
        trigger=RunTrigger.SCHEDULED,
        attempt=2,
        retry_of=failed,
    )
    run_of(endpoint, at("2026-11-22T03:00"), RunStatus.FAILURE)
    run_of(endpoint, at("2026-11-22T04:00"), RunStatus.RUNNING)
    run_of(endpoint, at("2026-11-22T05:00"), RunStatus.SUCCESS, trigger=RunTrigger.TEST)
    plan = plan_backfill(
        endpoint=endpoint, start=at("2026-11-22T01:00"), end=at("2026-11-22T06:00"), now=NOW
    )
    notes = {s.scheduled_for.hour: s.note for s in plan.slots}
    assert notes[1].startswith("ran: run ") and notes[2].startswith("ran: run ")
    assert notes[3] == "" and notes[5] == ""  # failed; a test is not a slot's run
    assert notes[4].startswith("running now: run ")
    assert plan.to_run == 2


def test_the_scheduler_keeps_its_own_next_run_even_when_it_is_overdue(make_endpoint):
    endpoint = make_endpoint(baseline_cron=CRON)
    start, end = the_range()
    overdue = start + timedelta(minutes=60)  # the scheduler was down since then
    Slot.objects.filter(pk=endpoint.pk).update(next_run_at=overdue)
    plan = plan_backfill(endpoint=endpoint, start=start, end=end)
    [kept] = [s for s in plan.slots if not s.runs]
    assert kept.scheduled_for == overdue
    assert kept.note == "the endpoint's next run: the scheduler runs it"
    assert plan.to_run == 47


def test_a_job_backfill_holds_the_slots_of_each_of_its_endpoints(job, make_endpoint):
    make_endpoint(baseline_cron="0 * * * *")
    make_endpoint(baseline_cron="30 * * * *")
    plan = plan_backfill(job=job, start=at("2026-11-22T00:00"), end=at("2026-11-22T03:00"), now=NOW)
    assert [s.scheduled_for.strftime("%H:%M") for s in plan.slots] == [
        "00:00", "00:30", "01:00", "01:30", "02:00", "02:30"
    ]  # fmt: skip


def test_an_endpoint_deleted_for_good_takes_its_backfills_and_their_slots(make_endpoint):
    from endpoints.backfill import start_backfill
    from endpoints.backfill_models import Backfill, BackfillSlot
    from endpoints.operations import delete_for_good

    endpoint = make_endpoint(baseline_cron=CRON)
    start, end = the_range()
    start_backfill(endpoint=endpoint, start=start, end=end)
    assert BackfillSlot.objects.count() == 48
    assert delete_for_good(Endpoint.objects.filter(pk=endpoint.pk)) == 1
    assert not Backfill.objects.exists() and not BackfillSlot.objects.exists()


def test_while_the_live_schedule_is_late_a_pass_starts_one_slot_of_a_backfill(make_endpoint):
    from django.utils import timezone

    from endpoints.backfill import backfill_progress, start_backfill
    from endpoints.engine.backfilling import claim_backfill_slots, live_is_late

    live = make_endpoint(baseline_interval_ms=1000)
    now = timezone.now()
    for k in range(20):  # started 200 ms after their slots, within the last second
        started = now - timedelta(milliseconds=50 * k + 10)
        Run.objects.create(
            endpoint=live,
            scheduled_for=started - timedelta(milliseconds=200),
            started_at=started,
            status=RunStatus.SUCCESS,
        )
    assert live_is_late(now)
    endpoint = make_endpoint(baseline_cron=CRON)
    start, end = the_range()
    backfill = start_backfill(endpoint=endpoint, start=start, end=end, rate=100)
    assert len(claim_backfill_slots(backfill.pk, now=now, most=1)) == 1
    assert backfill_progress(backfill)["started"] == 1
    Run.objects.filter(endpoint=live).delete()
    assert not live_is_late(now)
