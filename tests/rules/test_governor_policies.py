"""The governor with run policies (backoff cap, jitter, retries within a slot): hypothesis
invariants, and the spread jitter gives a thousand endpoints on one cron instant."""

from __future__ import annotations

import dataclasses
from collections import Counter
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from zoneinfo import ZoneInfo

from hypothesis import given, settings

from endpoints.governor import (
    RETRY,
    EndpointSchedule,
    decide,
    explain_plan,
    plan_next_run,
)
from endpoints.policies import jitter_offset_ms
from endpoints.schedules import next_cron_after
from endpoints.windows import Window
from tests.rules.strategies import DAY_MS, inside, policy_situations


@settings(max_examples=400, deadline=None)
@given(policy_situations())
def test_never_in_the_past_never_before_a_pause_ends_never_below_the_minimums(
    situation: tuple[datetime, EndpointSchedule],
) -> None:
    now, schedule = situation
    plan = plan_next_run(now, schedule)

    assert plan.next_run_at >= now
    if schedule.paused_until is not None and schedule.paused_until > now:
        assert (plan.next_run_at, plan.source) == (schedule.paused_until, "paused")
        return
    floor = schedule.tenant_min_interval_ms
    if floor:
        assert plan.next_run_at >= now + timedelta(milliseconds=floor)
    low, high = schedule.min_interval_ms, schedule.max_interval_ms
    if low and (not high or low <= high):
        assert plan.next_run_at >= now + timedelta(milliseconds=low)


@settings(max_examples=400, deadline=None)
@given(policy_situations())
def test_never_inside_a_blackout_window_unless_a_pause_ends_there(
    situation: tuple[datetime, EndpointSchedule],
) -> None:
    now, schedule = situation
    plan = plan_next_run(now, schedule)
    if plan.source == "paused":
        return
    zone = ZoneInfo(schedule.timezone)
    assert not inside(plan.next_run_at, zone, schedule.blackout)


def test_a_blackout_window_moves_the_run_to_its_end_and_explain_says_so() -> None:
    now = datetime(2026, 11, 25, 0, 30, tzinfo=UTC)  # 01:30 in Berlin
    nightly = EndpointSchedule(
        baseline_cron="0 * * * *",
        timezone="Europe/Berlin",
        blackout=(Window(2 * 60, 4 * 60),),
    )
    plan = plan_next_run(now, nightly)
    # The next slot, 02:00 Berlin, is inside: moved to 04:00 Berlin (03:00 UTC).
    assert (plan.next_run_at, plan.source) == (datetime(2026, 11, 25, 3, 0, tzinfo=UTC), "window")
    text = explain_plan(now, nightly)
    assert "set by a time window (blackout, allowed hours or active period)" in text
    assert "inside the blackout window 02:00-04:00 daily (Europe/Berlin)" in text
    # Over a DST change (Berlin springs forward at 02:00 on 2026-03-29): still its end.
    spring = datetime(2026, 3, 29, 0, 30, tzinfo=UTC)  # 01:30 CET; 02:00 is skipped
    moved = plan_next_run(spring, nightly)
    assert moved.next_run_at == datetime(2026, 3, 29, 2, 0, tzinfo=UTC)  # 04:00 CEST


@settings(max_examples=200, deadline=None)
@given(policy_situations())
def test_the_same_inputs_give_the_same_answer(situation: tuple[datetime, EndpointSchedule]) -> None:
    now, schedule = situation
    copy = dataclasses.replace(schedule)
    assert plan_next_run(now, schedule) == plan_next_run(now, copy)
    assert decide(now, schedule).steps == decide(now, copy).steps


@settings(max_examples=300, deadline=None)
@given(policy_situations())
def test_backoff_never_exceeds_the_cap_or_the_interval_if_longer(
    situation: tuple[datetime, EndpointSchedule],
) -> None:
    now, schedule = situation
    if schedule.baseline_cron or schedule.backoff_cap_ms is None:
        return
    baseline = decide(now, schedule).baseline
    interval = schedule.baseline_interval_ms or 0
    assert baseline.at - now <= timedelta(milliseconds=max(interval, schedule.backoff_cap_ms))
    assert baseline.at - now >= timedelta(milliseconds=interval)


@settings(max_examples=300, deadline=None)
@given(policy_situations())
def test_a_jittered_cron_run_is_its_slot_plus_the_offset_and_never_repeats_a_slot(
    situation: tuple[datetime, EndpointSchedule],
) -> None:
    now, schedule = situation
    if not schedule.baseline_cron:
        return
    baseline = decide(now, schedule).baseline
    offset = timedelta(milliseconds=schedule.jitter_offset_ms)
    slot = baseline.at - offset
    assert baseline.at > now
    # ``slot`` is a cron instant: the first one after the instant just before it.
    assert next_cron_after(schedule.baseline_cron, schedule.timezone, slot - timedelta(seconds=1))
    # Start-to-start: planning from the jittered run's own start gives the next slot.
    after = decide(baseline.at, schedule).baseline
    assert after.at - offset > slot


@settings(max_examples=300, deadline=None)
@given(policy_situations())
def test_a_retry_is_never_later_than_the_next_slot(
    situation: tuple[datetime, EndpointSchedule],
) -> None:
    now, schedule = situation
    decision = decide(now, schedule)
    if decision.chosen.source == RETRY:
        # Earlier than the run that would come next without it (the baseline, or a hint).
        without = decide(now, dataclasses.replace(schedule, retry_at=None))
        assert decision.chosen.at < without.chosen.at or decision.chosen.at == now
        assert decision.plan.source in (RETRY, "paused")


def test_the_default_cap_keeps_a_daily_endpoint_daily_after_a_failure() -> None:
    now = datetime(2026, 11, 25, 9, 0, tzinfo=UTC)
    daily = EndpointSchedule(baseline_interval_ms=DAY_MS, failure_count=1, backoff_cap_ms=3_600_000)
    assert plan_next_run(now, daily).next_run_at == now + timedelta(days=1)
    assert "backed off to 1 day (the cap)" in explain_plan(now, daily)
    minutely = dataclasses.replace(daily, baseline_interval_ms=60_000, failure_count=5)
    assert plan_next_run(now, minutely).next_run_at == now + timedelta(minutes=32)


def test_a_thousand_endpoints_on_one_cron_instant_spread_over_30_seconds(capsys) -> None:
    """Checked through the governor's plan of each endpoint (``from_endpoint`` reads the
    policy as the engine does), not by waiting for 1 000 live runs."""
    now = datetime(2026, 11, 25, 8, 59, 30, tzinfo=UTC)
    slot = datetime(2026, 11, 25, 9, 0, tzinfo=UTC)
    planned = []
    for pk in range(1, 1001):
        endpoint = SimpleNamespace(
            pk=pk,
            baseline_cron="0 * * * *",
            timezone="UTC",
            baseline_interval_ms=None,
            min_interval_ms=None,
            max_interval_ms=None,
            ai_hint_interval_ms=None,
            ai_hint_next_run_at=None,
            ai_hint_expires_at=None,
            paused_until=None,
            failure_count=0,
            tenant_min_interval_ms=1_000,
            job_run_policy={"jitter_ms": 30_000},
            run_policy={},
        )
        plan = plan_next_run(now, EndpointSchedule.from_endpoint(endpoint))
        assert plan.source == "baseline-cron"
        planned.append(plan.next_run_at)
        # Each still runs once per slot: from its own start, the next is the next hour's.
        again = plan_next_run(plan.next_run_at, EndpointSchedule.from_endpoint(endpoint))
        assert again.next_run_at - plan.next_run_at == timedelta(hours=1)

    spread = [(at - slot).total_seconds() for at in planned]
    assert min(spread) >= 0 and max(spread) <= 30
    buckets = Counter(int(seconds // 3) for seconds in spread)
    with capsys.disabled():
        print("\njitter 30 s, 1000 endpoints on 0 * * * *: starts per 3 s")
        for bucket in range(10):
            count = buckets.get(bucket, 0)
            print(f"  {bucket * 3:2d}-{bucket * 3 + 3:2d} s {count:4d} {'#' * (count // 5)}")
    assert all(60 <= buckets.get(bucket, 0) <= 140 for bucket in range(10))
    assert jitter_offset_ms(7, 30_000) == jitter_offset_ms(7, 30_000)  # deterministic
