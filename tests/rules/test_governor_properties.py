"""Invariants of the governor, checked with hypothesis over bounded, aware-UTC inputs."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from endpoints.governor import EndpointSchedule, plan_next_run
from tests.rules.strategies import DAY_MS, crons, moments, situations

SOURCES = {
    "baseline-cron",
    "baseline-interval",
    "ai-interval",
    "ai-oneshot",
    "clamped-min",
    "clamped-max",
    "paused",
}


def ms(value: int) -> timedelta:
    return timedelta(milliseconds=value)


def not_paused(now: datetime, schedule: EndpointSchedule) -> bool:
    return schedule.paused_until is None or schedule.paused_until <= now


@settings(max_examples=300, deadline=None)
@given(situations())
def test_a_pause_after_now_always_wins(situation: tuple[datetime, EndpointSchedule]) -> None:
    now, schedule = situation
    plan = plan_next_run(now, schedule)
    if schedule.paused_until is not None and schedule.paused_until > now:
        assert (plan.next_run_at, plan.source) == (schedule.paused_until, "paused")
    else:
        assert plan.source != "paused"


@settings(max_examples=300, deadline=None)
@given(situations())
def test_an_unpaused_plan_is_never_before_now_and_respects_the_bounds(
    situation: tuple[datetime, EndpointSchedule],
) -> None:
    now, schedule = situation
    if not not_paused(now, schedule):
        return
    at = plan_next_run(now, schedule).next_run_at
    assert at >= now
    low, high = schedule.min_interval_ms, schedule.max_interval_ms
    if high and (not low or low <= high):
        assert at <= now + ms(high)
    if low and (not high or low <= high):
        assert at >= now + ms(low)
    if low and high and low > high:
        assert at == now + ms(high)  # min then max: max wins


@settings(max_examples=200, deadline=None)
@given(situations())
def test_the_same_inputs_give_the_same_plan(situation: tuple[datetime, EndpointSchedule]) -> None:
    now, schedule = situation
    copy = dataclasses.replace(schedule)
    assert plan_next_run(now, schedule) == plan_next_run(now, copy)


@settings(max_examples=200, deadline=None)
@given(situations())
def test_the_source_is_always_one_of_the_seven(
    situation: tuple[datetime, EndpointSchedule],
) -> None:
    now, schedule = situation
    assert plan_next_run(now, schedule).source in SOURCES


@settings(max_examples=200, deadline=None)
@given(situations(), st.integers(1_000, 7 * DAY_MS), crons)
def test_a_fresh_interval_hint_alone_makes_the_baseline_irrelevant(
    situation: tuple[datetime, EndpointSchedule], other_interval: int, other_cron: str
) -> None:
    now, schedule = situation
    schedule = dataclasses.replace(
        schedule,
        ai_hint_interval_ms=schedule.ai_hint_interval_ms or 60_000,
        ai_hint_next_run_at=None,
        ai_hint_expires_at=now + timedelta(minutes=5),
        paused_until=None,
    )
    plan = plan_next_run(now, schedule)
    for baseline in (
        {"baseline_cron": "", "baseline_interval_ms": other_interval},
        {"baseline_cron": other_cron, "baseline_interval_ms": None},
    ):
        assert plan_next_run(now, dataclasses.replace(schedule, **baseline)) == plan
    assert plan.source in {"ai-interval", "clamped-min", "clamped-max"}
    if plan.source == "ai-interval":
        assert plan.next_run_at == now + ms(schedule.ai_hint_interval_ms or 0)


@settings(max_examples=200, deadline=None)
@given(situations())
def test_a_cron_baseline_without_hints_or_bounds_is_strictly_after_now(
    situation: tuple[datetime, EndpointSchedule],
) -> None:
    now, schedule = situation
    schedule = dataclasses.replace(
        schedule,
        baseline_cron=schedule.baseline_cron or "*/15 * * * *",
        baseline_interval_ms=None,
        ai_hint_expires_at=None,
        paused_until=None,
        min_interval_ms=None,
        max_interval_ms=None,
    )
    plan = plan_next_run(now, schedule)
    assert plan.source == "baseline-cron"
    assert now < plan.next_run_at <= now + timedelta(days=7)


@settings(max_examples=200, deadline=None)
@given(moments, st.integers(1_000, 7 * DAY_MS), st.integers(0, 40))
def test_backoff_multiplies_the_interval_by_at_most_32(
    now: datetime, interval: int, failures: int
) -> None:
    # The original's rule, with the run policy's cap off...
    plan = plan_next_run(
        now,
        EndpointSchedule(
            baseline_interval_ms=interval, failure_count=failures, backoff_cap_ms=None
        ),
    )
    assert plan.next_run_at == now + ms(interval * 2 ** min(failures, 5))
    # ...and with the default cap: never beyond max(interval, cap).
    capped = plan_next_run(
        now, EndpointSchedule(baseline_interval_ms=interval, failure_count=failures)
    )
    cap = EndpointSchedule().backoff_cap_ms or 0
    backed_off = interval * 2 ** min(failures, 5)
    expected = backed_off if failures == 0 else min(backed_off, max(interval, cap))
    assert capped.next_run_at == now + ms(expected)
