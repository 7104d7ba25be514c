"""The governor with run-policy windows: an active period, a one-off, allowed windows (with
blackouts inside them). Hypothesis invariants over every policy together, and the rules
table-driven, DST included. Pure: no database."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from endpoints.governor import (
    ENDED,
    ONCE,
    PAUSED,
    RETRY,
    WINDOW,
    EndpointSchedule,
    decide,
    explain_plan,
    plan_after_edit,
    plan_next_run,
    preview_runs,
)
from endpoints.policies import past_one_off, policy_problems, resolve_policy
from endpoints.windows import (
    Window,
    first_instant_at,
    free_week,
    next_free,
    windows_leave_time,
)
from tests.rules.strategies import WINDOW_SETS, inside, moments, policy_situations, zones

WEEKDAYS = frozenset(range(5))
ALLOWED_SETS = [
    (),
    (Window(9 * 60, 17 * 60, WEEKDAYS),),  # business hours
    (Window(23 * 60, 60),),  # over midnight, every day
    (Window(2 * 60 + 30, 3 * 60), Window(12 * 60, 12 * 60 + 5, frozenset({6}))),  # DST hour
]
BERLIN = ZoneInfo("Europe/Berlin")


def berlin(*args: int) -> datetime:
    return datetime(*args, tzinfo=BERLIN).astimezone(UTC)  # type: ignore[misc]


@st.composite
def windowed(draw: st.DrawFn) -> tuple[datetime, EndpointSchedule]:
    """Every policy at once: the run-policy situations, plus allowed windows that leave
    time outside the blackouts (validation refuses the others), an active period and a
    one-off around ``now``."""
    now, schedule = draw(policy_situations())
    allowed = draw(st.sampled_from(ALLOWED_SETS))
    assume(not allowed or windows_leave_time(allowed, schedule.blackout))
    near = st.timedeltas(min_value=timedelta(days=-3), max_value=timedelta(days=3))
    start = draw(st.one_of(st.none(), near.map(lambda delta: now + delta)))
    end = draw(st.one_of(st.none(), near.map(lambda delta: now + delta)))
    assume(start is None or end is None or end > start)
    once = draw(st.one_of(st.none(), near.map(lambda delta: now + delta)))
    assume(once is None or end is None or once <= end)
    return now, dataclasses.replace(
        schedule,
        allowed=allowed,
        active_from=start,
        active_until=end,
        run_once_at=once,
        retry_at=draw(st.one_of(st.none(), st.just(schedule.retry_at))),
    )


@settings(max_examples=500, deadline=None)
@given(windowed())
def test_every_policy_together_keeps_every_promise(
    situation: tuple[datetime, EndpointSchedule],
) -> None:
    now, schedule = situation
    plan = plan_next_run(now, schedule)
    at = plan.next_run_at
    if at is None:
        assert plan.source == ENDED
        once_done = schedule.run_once_at is not None and schedule.run_once_at <= now
        assert schedule.active_until is not None or once_done
        return
    assert at >= now
    if schedule.active_until is not None:
        assert at <= schedule.active_until
    if schedule.active_from is not None:
        assert at >= schedule.active_from
    if schedule.run_once_at is not None:
        # A one-off runs at its time or later; only a retry within a slot comes before.
        retry = (decision := decide(now, schedule)).chosen is not None and (
            decision.chosen.source == RETRY
        )
        assert retry or (schedule.run_once_at > now and at >= schedule.run_once_at)
    if schedule.paused_until is not None and schedule.paused_until > now:
        assert at >= schedule.paused_until
    if plan.source != PAUSED:  # a pause's end is the one exception (DESIGN: pause wins)
        for floor in (schedule.tenant_min_interval_ms, schedule.min_interval_ms):
            high = schedule.max_interval_ms
            if floor and (floor == schedule.tenant_min_interval_ms or not high or floor <= high):
                assert at >= now + timedelta(milliseconds=floor)
        zone = ZoneInfo(schedule.timezone)
        assert not inside(at, zone, schedule.blackout)
        assert not schedule.allowed or inside(at, zone, schedule.allowed)


@settings(max_examples=200, deadline=None)
@given(windowed())
def test_the_same_inputs_give_the_same_answer_with_windows(
    situation: tuple[datetime, EndpointSchedule],
) -> None:
    now, schedule = situation
    copy = dataclasses.replace(schedule)
    assert decide(now, schedule) == decide(now, copy)


@settings(max_examples=150, deadline=None)
@given(windowed())
def test_a_preview_follows_the_same_promises_and_stops_at_the_end(
    situation: tuple[datetime, EndpointSchedule],
) -> None:
    now, schedule = situation
    runs = preview_runs(now, schedule, 6)
    times = [run.next_run_at for run in runs]
    assert times == sorted(times)
    if schedule.active_until is not None:
        assert all(at <= schedule.active_until for at in times)
    if schedule.run_once_at is not None:
        assert len([run for run in runs if run.source == ONCE]) <= 1


# --- the active period ----------------------------------------------------------------


def test_before_the_active_period_a_cron_runs_at_its_first_slot_at_or_after_the_start() -> None:
    now = datetime(2026, 11, 25, 10, 0, tzinfo=UTC)
    daily = EndpointSchedule(
        baseline_cron="0 9 * * *",
        timezone="Europe/Berlin",
        active_from=berlin(2026, 12, 1, 9, 0),  # a slot exactly then counts
        active_until=berlin(2026, 12, 3, 9, 0),
    )
    plan = plan_next_run(now, daily)
    assert (plan.next_run_at, plan.source) == (berlin(2026, 12, 1, 9, 0), WINDOW)
    assert "before the active period, which starts at 2026-12-01 08:00:00 UTC" in (
        explain_plan(now, daily)
    )
    runs = preview_runs(now, daily, 10)
    assert [run.next_run_at for run in runs] == [
        berlin(2026, 12, 1, 9, 0),
        berlin(2026, 12, 2, 9, 0),
        berlin(2026, 12, 3, 9, 0),  # at the end itself: still inside
    ]


def test_before_the_active_period_an_interval_starts_at_the_start() -> None:
    start = datetime(2026, 12, 1, 8, 0, 30, tzinfo=UTC)
    hourly = EndpointSchedule(baseline_interval_ms=3_600_000, active_from=start)
    plan = plan_next_run(datetime(2026, 11, 25, tzinfo=UTC), hourly)
    assert (plan.next_run_at, plan.source) == (start, WINDOW)
    assert plan_next_run(start, hourly).next_run_at == start + timedelta(hours=1)


def test_after_the_active_period_there_is_no_next_run_and_explain_says_why() -> None:
    end = datetime(2026, 12, 3, 8, 0, tzinfo=UTC)
    hourly = EndpointSchedule(baseline_interval_ms=3_600_000, active_until=end)
    assert plan_next_run(end - timedelta(minutes=30), hourly).next_run_at is None
    plan = plan_next_run(end - timedelta(hours=2), hourly)
    assert plan.next_run_at == end - timedelta(hours=1)
    text = explain_plan(end + timedelta(days=1), hourly)
    assert text.startswith(
        "No next run: the active period ended at 2026-12-03 08:00:00 UTC; no more runs."
    )
    # A pause that ends after the end does not bring a run back.
    paused = dataclasses.replace(hourly, paused_until=end + timedelta(hours=1))
    assert plan_next_run(end - timedelta(hours=2), paused) == plan_next_run(
        end + timedelta(hours=3), hourly
    )


def test_a_pause_never_brings_a_run_before_the_active_period() -> None:
    now = datetime(2026, 11, 25, tzinfo=UTC)
    start = now + timedelta(days=2)
    schedule = EndpointSchedule(
        baseline_interval_ms=60_000, active_from=start, paused_until=now + timedelta(days=1)
    )
    decision = decide(now, schedule)
    assert decision.plan.next_run_at == start
    assert "but no run comes before" in decision.steps[-1]


# --- one-off endpoints ----------------------------------------------------------------


def test_a_one_off_runs_once_at_its_time_then_never() -> None:
    now = datetime(2026, 11, 25, 10, 0, tzinfo=UTC)
    at = now + timedelta(hours=3)
    one_off = EndpointSchedule(baseline_interval_ms=60_000, max_interval_ms=600_000, run_once_at=at)
    plan = plan_next_run(now, one_off)
    assert (plan.next_run_at, plan.source) == (at, ONCE)  # the maximum does not bring it forward
    text = explain_plan(now, one_off)
    assert "set by the one-off time (run_once_at)" in text
    assert "the baseline schedule is not used" in text
    assert plan_next_run(at, one_off).next_run_at is None  # planned from its own start
    assert [run.source for run in preview_runs(now, one_off, 5)] == [ONCE]


def test_a_failed_one_off_is_still_retried_within_its_slot() -> None:
    at = datetime(2026, 11, 25, 10, 0, tzinfo=UTC)
    failed = EndpointSchedule(
        baseline_interval_ms=60_000,
        run_once_at=at,
        retry_at=at + timedelta(seconds=11),
        retry_attempt=1,
    )
    plan = plan_next_run(at + timedelta(seconds=1), failed)
    assert (plan.next_run_at, plan.source) == (at + timedelta(seconds=11), RETRY)


def test_an_edit_after_a_one_off_missed_its_time_runs_it_now_and_after_its_run_never() -> None:
    at = datetime(2026, 11, 25, 10, 0, tzinfo=UTC)
    now = at + timedelta(hours=1)  # the scheduler was down at ``at``
    one_off = EndpointSchedule(baseline_interval_ms=60_000, run_once_at=at)
    for last in (None, at - timedelta(days=1)):
        plan = plan_after_edit(now, last, one_off)
        assert plan.source == ONCE and plan.next_run_at is not None
        assert timedelta(0) < plan.next_run_at - now < timedelta(milliseconds=1)
    assert plan_after_edit(now, at, one_off).next_run_at is None  # it ran


def test_a_past_one_off_is_refused_only_when_it_is_new() -> None:
    now = datetime(2026, 11, 25, 10, 0, tzinfo=UTC)
    past = {"run_once_at": "2026-11-25T09:00:00Z"}
    assert past_one_off(past, {}, now) == (
        "run_once_at: 2026-11-25T09:00:00Z is in the past; give a future time, or use Run now."
    )
    assert past_one_off(past, past, now) == ""  # stored, maybe already run: left alone
    assert past_one_off(past, {"run_once_at": "2026-11-25T10:00:00+01:00"}, now) == ""
    assert past_one_off({"run_once_at": "2026-11-25T11:00:00Z"}, {}, now) == ""


# --- allowed windows ------------------------------------------------------------------


def test_outside_the_allowed_windows_a_run_moves_to_the_next_opening() -> None:
    hours = (Window(9 * 60, 17 * 60, WEEKDAYS),)
    lunch = (Window(12 * 60, 13 * 60),)
    schedule = EndpointSchedule(
        baseline_interval_ms=3_600_000, timezone="Europe/Berlin", allowed=hours, blackout=lunch
    )
    friday_evening = berlin(2026, 11, 27, 16, 30)
    plan = plan_next_run(friday_evening, schedule)
    assert (plan.next_run_at, plan.source) == (berlin(2026, 11, 30, 9, 0), WINDOW)
    assert (
        "outside the allowed windows (09:00-17:00 mon,tue,wed,thu,fri, Europe/Berlin): "
        "moved to the next opening, 2026-11-30 08:00:00 UTC"
    ) in explain_plan(friday_evening, schedule)
    # A blackout inside the allowed hours still holds.
    assert plan_next_run(berlin(2026, 11, 30, 11, 30), schedule).next_run_at == berlin(
        2026, 11, 30, 13, 0
    )


def test_an_opening_in_the_spring_forward_gap_is_the_first_instant_after_it() -> None:
    # Berlin skips 02:00-03:00 on 2026-03-29: a window opening at 02:30 opens at 03:00 CEST.
    schedule = EndpointSchedule(
        baseline_interval_ms=3_600_000,
        timezone="Europe/Berlin",
        allowed=(Window(2 * 60 + 30, 4 * 60),),
    )
    plan = plan_next_run(datetime(2026, 3, 28, 22, 0, tzinfo=UTC), schedule)
    assert plan.next_run_at == datetime(2026, 3, 29, 1, 0, tzinfo=UTC)
    # A window the gap swallows whole opens nothing that night: the next day's.
    swallowed = dataclasses.replace(schedule, allowed=(Window(2 * 60, 2 * 60 + 30),))
    plan = plan_next_run(datetime(2026, 3, 28, 22, 0, tzinfo=UTC), swallowed)
    assert plan.next_run_at == berlin(2026, 3, 30, 2, 0)
    # The fall-back fold: the first of the two 02:30s.
    assert first_instant_at(datetime(2026, 10, 25, 2, 30), BERLIN) == datetime(
        2026, 10, 25, 0, 30, tzinfo=UTC
    )


@settings(max_examples=150, deadline=None)
@given(
    moments,
    zones,
    st.sampled_from(ALLOWED_SETS),
    st.sampled_from([*WINDOW_SETS, (Window(9 * 60, 9 * 60 + 1, frozenset({2})),)]),
)
def test_the_first_free_time_is_the_one_a_walk_minute_by_minute_finds(
    at: datetime, zone_name: str, allowed: tuple[Window, ...], blackout: tuple[Window, ...]
) -> None:
    """One bisection in the free week finds what walking the wall clock finds: the
    first instant inside an allowed window and outside every blackout, DST included."""
    assume(windows_leave_time(allowed, blackout))
    zone = ZoneInfo(zone_name)

    def free(moment: datetime) -> bool:
        return not inside(moment, zone, blackout) and (not allowed or inside(moment, zone, allowed))

    walked = at
    if not free(at):
        walked = at.replace(second=0, microsecond=0) + timedelta(minutes=1)
        for _ in range(8 * 24 * 60):
            if free(walked):
                break
            walked += timedelta(minutes=1)
    assert next_free(at, zone, free_week(allowed, blackout)) == walked


def test_a_policy_with_one_free_minute_a_week_plans_in_one_step() -> None:
    """The worst valid windows: the whole week blacked out but one minute, Wednesday
    23:59. The plan is one lookup, not a walk through the week (issue 32)."""
    not_wednesday = frozenset({0, 1, 3, 4, 5, 6})
    blackout = (Window(0, 23 * 60 + 59), Window(23 * 60 + 59, 0, not_wednesday))
    schedule = EndpointSchedule(
        baseline_interval_ms=1_000, timezone="Europe/Berlin", blackout=blackout
    )
    now = berlin(2026, 11, 26, 9, 1)  # a Thursday, just after the free minute
    decision = decide(now, schedule)
    assert decision.plan.next_run_at == berlin(2026, 12, 2, 23, 59)
    assert sum("moved" in step for step in decision.steps) == 1


def test_a_search_that_finds_no_time_ends_with_a_step_never_a_loop() -> None:
    """Validation refuses such a policy; one stored some other way still ends."""
    schedule = EndpointSchedule(
        baseline_interval_ms=60_000,
        allowed=(Window(9 * 60, 17 * 60),),
        blackout=(Window(8 * 60, 18 * 60),),
    )
    decision = decide(datetime(2026, 11, 25, tzinfo=UTC), schedule)
    assert decision.plan.next_run_at is None and decision.plan.source == ENDED
    assert decision.steps[-1].startswith("no time inside the allowed windows")


@pytest.mark.parametrize(
    ("policy", "words"),
    [
        (
            {"active_from": "2026-12-01T09:00:00"},
            'has no offset, so its instant is unknown; add one, e.g. "+01:00" or "Z".',
        ),
        ({"active_until": "tomorrow"}, "is not an ISO 8601 date-time"),
        # Their instants are in the years 0 and 10000, which datetime cannot hold.
        ({"run_once_at": "0001-01-01T00:00:00+01:00"}, "is not between the years 2000 and 9000"),
        ({"active_until": "9999-12-31T23:59:59-01:00"}, "is not between the years 2000 and 9000"),
        (
            {"active_from": "2026-12-02T00:00:00Z", "active_until": "2026-12-01T00:00:00Z"},
            "active_until: 2026-12-01T00:00:00Z is not after active_from",
        ),
        (
            {"run_once_at": "2026-12-05T00:00:00Z", "active_until": "2026-12-01T00:00:00Z"},
            "the one-off would never run",
        ),
        ({"allowed": [{"start": "09:00"}]}, "allowed: window 1: give start and end"),
        (
            {
                "allowed": [{"start": "09:00", "end": "17:00", "days": ["mon"]}],
                "blackout": [{"start": "08:00", "end": "18:00"}],
            },
            "every allowed window lies inside a blackout window",
        ),
    ],
)
def test_window_keys_are_validated_in_words(policy: dict, words: str) -> None:
    problems = policy_problems(policy)
    assert any(words in problem for problem in problems), problems


def test_window_keys_resolve_job_defaults_and_endpoint_overrides() -> None:
    policy = resolve_policy(
        {
            "active_until": "2026-12-01T09:00:00+01:00",
            "allowed": [{"start": "09:00", "end": "17:00"}],
        },
        {"run_once_at": "2026-11-30T12:00:00Z"},
    )
    assert policy.active_until == datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
    assert policy.run_once_at == datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    assert policy.allowed == (Window(9 * 60, 17 * 60),)
    # Over the week, not by day: a blackout on Mondays leaves the other weekdays.
    assert windows_leave_time(
        (Window(9 * 60, 17 * 60, WEEKDAYS),), (Window(0, 0 + 23 * 60, frozenset({0})),)
    )
    assert WINDOW_SETS  # the blackout sets the properties combine with
