"""The governor, table-driven and without a database: every rule, tie and strictness case.

Each table row names the case; ``NOW`` is fixed, and offsets are relative to it.
"""

from __future__ import annotations

import dataclasses
import itertools
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from endpoints.governor import (
    POLICY_FIELDS,
    SOURCE_WORDS,
    EndpointSchedule,
    decide,
    explain_plan,
    plan_next_run,
)
from endpoints.models import Endpoint, Source

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
US = timedelta(microseconds=1)
SEC = timedelta(seconds=1)
MIN = timedelta(minutes=1)
HOUR = timedelta(hours=1)


def sched(**fields: Any) -> EndpointSchedule:
    """A schedule with a 60 s baseline interval unless told otherwise."""
    if "baseline_cron" not in fields and "baseline_interval_ms" not in fields:
        fields["baseline_interval_ms"] = 60_000
    return EndpointSchedule(**fields)


def hints(
    *, interval: timedelta | None = None, at: datetime | None = None, ttl: timedelta = HOUR
) -> dict[str, Any]:
    """Hint fields: an interval hint and/or a one-shot, both under one expiry ``NOW + ttl``."""
    fields: dict[str, Any] = {"ai_hint_expires_at": NOW + ttl}
    if interval is not None:
        fields["ai_hint_interval_ms"] = int(interval / timedelta(milliseconds=1))
    if at is not None:
        fields["ai_hint_next_run_at"] = at
    return fields


def case(name: str, schedule: EndpointSchedule, at: datetime | timedelta, source: str) -> Any:
    expected = NOW + at if isinstance(at, timedelta) else at
    return pytest.param(schedule, expected, source, id=name)


def check(schedule: EndpointSchedule, expected: datetime, source: str) -> None:
    plan = plan_next_run(NOW, schedule)
    assert (plan.next_run_at, plan.source) == (expected, source)


BASELINE = [
    case("interval-is-now-plus-interval", sched(), MIN, "baseline-interval"),
    case(
        "cron-is-strictly-after-now-even-on-a-slot",
        sched(baseline_cron="*/5 * * * *"),
        5 * MIN,
        "baseline-cron",
    ),
    case(
        "cron-is-evaluated-in-the-endpoint-time-zone",
        sched(baseline_cron="0 9 * * *", timezone="Europe/Berlin"),
        datetime(2026, 6, 2, 7, 0, tzinfo=UTC),
        "baseline-cron",
    ),
    case(
        "cron-shorthand",
        sched(baseline_cron="@hourly"),
        HOUR,
        "baseline-cron",
    ),
]


@pytest.mark.parametrize(("schedule", "expected", "source"), BASELINE)
def test_the_baseline_is_the_next_cron_slot_or_now_plus_the_interval(
    schedule: EndpointSchedule, expected: datetime, source: str
) -> None:
    check(schedule, expected, source)


@pytest.mark.parametrize(
    ("failures", "factor"),
    [(0, 1), (1, 2), (2, 4), (3, 8), (4, 16), (5, 32), (6, 32), (7, 32)],
    ids=lambda value: str(value),
)
def test_failures_back_off_the_baseline_interval_doubling_up_to_32_times(
    failures: int, factor: int
) -> None:
    check(sched(failure_count=failures), NOW + factor * MIN, "baseline-interval")


NO_BACKOFF = [
    case(
        "cron",
        sched(baseline_cron="*/5 * * * *", failure_count=4),
        5 * MIN,
        "baseline-cron",
    ),
    case(
        "interval-hint",
        sched(failure_count=4, **hints(interval=10 * SEC)),
        10 * SEC,
        "ai-interval",
    ),
    case(
        "one-shot-hint",
        sched(failure_count=4, **hints(at=NOW + 2 * MIN)),
        2 * MIN,
        "ai-oneshot",
    ),
    case(
        "one-shot-vs-backed-off-baseline",
        # A one-shot is weighed against the backed-off baseline (x16 = 16 min).
        sched(failure_count=4, **hints(at=NOW + 20 * MIN)),
        16 * MIN,
        "baseline-interval",
    ),
]


@pytest.mark.parametrize(("schedule", "expected", "source"), NO_BACKOFF)
def test_backoff_applies_to_the_baseline_interval_only(
    schedule: EndpointSchedule, expected: datetime, source: str
) -> None:
    check(schedule, expected, source)


FRESHNESS = [
    case(
        "interval-hint-expiring-exactly-now-is-stale",
        sched(**hints(interval=10 * SEC, ttl=timedelta(0))),
        MIN,
        "baseline-interval",
    ),
    case(
        "interval-hint-expiring-a-microsecond-later-is-fresh",
        sched(**hints(interval=10 * SEC, ttl=US)),
        10 * SEC,
        "ai-interval",
    ),
    case(
        "one-shot-expiring-exactly-now-is-stale",
        sched(**hints(at=NOW + 10 * SEC, ttl=timedelta(0))),
        MIN,
        "baseline-interval",
    ),
    case(
        "one-shot-expiring-a-microsecond-later-is-fresh",
        sched(**hints(at=NOW + 10 * SEC, ttl=US)),
        10 * SEC,
        "ai-oneshot",
    ),
    case(
        "both-hints-expired-an-hour-ago-are-ignored",
        sched(**hints(interval=10 * SEC, at=NOW + 5 * SEC, ttl=-HOUR)),
        MIN,
        "baseline-interval",
    ),
    case(
        "a-hint-without-expiry-is-ignored",
        sched(ai_hint_interval_ms=10_000),
        MIN,
        "baseline-interval",
    ),
]


@pytest.mark.parametrize(("schedule", "expected", "source"), FRESHNESS)
def test_hints_are_fresh_only_while_they_expire_strictly_after_now(
    schedule: EndpointSchedule, expected: datetime, source: str
) -> None:
    check(schedule, expected, source)


CHOICE = [
    case(
        "both-hints-interval-earlier",
        sched(**hints(interval=10 * SEC, at=NOW + 20 * SEC)),
        10 * SEC,
        "ai-interval",
    ),
    case(
        "both-hints-one-shot-earlier",
        sched(**hints(interval=20 * SEC, at=NOW + 10 * SEC)),
        10 * SEC,
        "ai-oneshot",
    ),
    case(
        "both-hints-tie-goes-to-the-interval",
        sched(**hints(interval=20 * SEC, at=NOW + 20 * SEC)),
        20 * SEC,
        "ai-interval",
    ),
    case(
        "both-hints-ignore-an-earlier-baseline",
        sched(baseline_interval_ms=5_000, **hints(interval=2 * MIN, at=NOW + 3 * MIN)),
        2 * MIN,
        "ai-interval",
    ),
    case(
        "both-hints-ignore-an-earlier-cron",
        sched(baseline_cron="* * * * *", **hints(interval=2 * MIN, at=NOW + 3 * MIN)),
        2 * MIN,
        "ai-interval",
    ),
    case(
        "interval-hint-shorter-than-baseline-overrides-it",
        sched(**hints(interval=10 * SEC)),
        10 * SEC,
        "ai-interval",
    ),
    case(
        "interval-hint-longer-than-baseline-overrides-it",
        sched(**hints(interval=5 * MIN)),
        5 * MIN,
        "ai-interval",
    ),
    case(
        "interval-hint-overrides-a-cron-baseline",
        sched(baseline_cron="* * * * *", **hints(interval=5 * MIN)),
        5 * MIN,
        "ai-interval",
    ),
    case(
        "one-shot-earlier-than-baseline-wins",
        sched(**hints(at=NOW + 30 * SEC)),
        30 * SEC,
        "ai-oneshot",
    ),
    case(
        "one-shot-later-than-baseline-loses",
        sched(**hints(at=NOW + 90 * SEC)),
        MIN,
        "baseline-interval",
    ),
    case(
        "one-shot-tie-with-baseline-goes-to-the-baseline",
        sched(**hints(at=NOW + MIN)),
        MIN,
        "baseline-interval",
    ),
    case(
        "one-shot-tie-with-cron-goes-to-the-cron",
        sched(baseline_cron="*/5 * * * *", **hints(at=NOW + 5 * MIN)),
        5 * MIN,
        "baseline-cron",
    ),
    case(
        "one-shot-earlier-than-cron-wins",
        sched(baseline_cron="*/5 * * * *", **hints(at=NOW + 4 * MIN)),
        4 * MIN,
        "ai-oneshot",
    ),
    case(
        "no-fresh-hint-means-baseline",
        sched(),
        MIN,
        "baseline-interval",
    ),
]


@pytest.mark.parametrize(("schedule", "expected", "source"), CHOICE)
def test_the_choice_between_baseline_and_hints_follows_rule_3(
    schedule: EndpointSchedule, expected: datetime, source: str
) -> None:
    check(schedule, expected, source)


PAST = [
    case("one-shot-in-the-past-runs-now", sched(**hints(at=NOW - HOUR)), NOW, "ai-oneshot"),
    case("one-shot-exactly-now-runs-now", sched(**hints(at=NOW)), NOW, "ai-oneshot"),
    case(
        "one-shot-in-the-past-beats-the-interval-hint",
        sched(**hints(interval=10 * SEC, at=NOW - SEC)),
        NOW,
        "ai-oneshot",
    ),
    case(
        "one-shot-in-the-past-is-still-raised-to-the-minimum",
        sched(min_interval_ms=30_000, **hints(at=NOW - HOUR)),
        30 * SEC,
        "clamped-min",
    ),
]


@pytest.mark.parametrize(("schedule", "expected", "source"), PAST)
def test_a_one_shot_in_the_past_becomes_now(
    schedule: EndpointSchedule, expected: datetime, source: str
) -> None:
    check(schedule, expected, source)


CLAMPS = [
    case(
        "interval-below-min",
        sched(baseline_interval_ms=10_000, min_interval_ms=30_000),
        30 * SEC,
        "clamped-min",
    ),
    case(
        "backed-off-interval-above-max",
        sched(failure_count=5, max_interval_ms=600_000),
        10 * MIN,
        "clamped-max",
    ),
    case(
        "cron-below-min",
        sched(baseline_cron="*/5 * * * *", min_interval_ms=6 * 60_000),
        6 * MIN,
        "clamped-min",
    ),
    case(
        "cron-above-max",
        sched(baseline_cron="0 0 * * *", max_interval_ms=3_600_000),
        HOUR,
        "clamped-max",
    ),
    case(
        "interval-hint-below-min",
        sched(min_interval_ms=30_000, **hints(interval=5 * SEC)),
        30 * SEC,
        "clamped-min",
    ),
    case(
        "interval-hint-above-max",
        sched(max_interval_ms=3_600_000, **hints(interval=2 * HOUR)),
        HOUR,
        "clamped-max",
    ),
    case(
        "one-shot-above-max",
        sched(
            baseline_interval_ms=86_400_000, max_interval_ms=3_600_000, **hints(at=NOW + 3 * HOUR)
        ),
        HOUR,
        "clamped-max",
    ),
    case(
        "exactly-at-min-is-not-clamped",
        sched(min_interval_ms=60_000),
        MIN,
        "baseline-interval",
    ),
    case(
        "exactly-at-max-is-not-clamped",
        sched(max_interval_ms=60_000),
        MIN,
        "baseline-interval",
    ),
    case(
        "inside-both-bounds-is-not-clamped",
        sched(min_interval_ms=30_000, max_interval_ms=120_000),
        MIN,
        "baseline-interval",
    ),
    case(
        "min-above-max-below-both-max-wins",
        sched(min_interval_ms=600_000, max_interval_ms=300_000),
        5 * MIN,
        "clamped-max",
    ),
    case(
        "min-above-max-above-both-max-wins",
        sched(baseline_interval_ms=1_200_000, min_interval_ms=600_000, max_interval_ms=300_000),
        5 * MIN,
        "clamped-max",
    ),
    case(
        "zero-bounds-mean-none-short",
        sched(baseline_interval_ms=1_000, min_interval_ms=0, max_interval_ms=0),
        SEC,
        "baseline-interval",
    ),
    case(
        "zero-bounds-mean-none-long",
        sched(baseline_interval_ms=86_400_000, min_interval_ms=0, max_interval_ms=0),
        timedelta(days=1),
        "baseline-interval",
    ),
    case(
        "zero-max-with-a-real-min",
        sched(baseline_interval_ms=86_400_000, min_interval_ms=30_000, max_interval_ms=0),
        timedelta(days=1),
        "baseline-interval",
    ),
    case(
        "empty-bounds-mean-none",
        sched(baseline_interval_ms=1_000, min_interval_ms=None, max_interval_ms=None),
        SEC,
        "baseline-interval",
    ),
]


@pytest.mark.parametrize(("schedule", "expected", "source"), CLAMPS)
def test_clamps_apply_min_then_max_relative_to_now(
    schedule: EndpointSchedule, expected: datetime, source: str
) -> None:
    check(schedule, expected, source)


PAUSES = [
    case(
        "pause-a-microsecond-ahead-wins",
        sched(paused_until=NOW + US),
        NOW + US,
        "paused",
    ),
    case(
        "pause-ending-exactly-now-does-not",
        sched(paused_until=NOW),
        MIN,
        "baseline-interval",
    ),
    case(
        "pause-in-the-past-does-not",
        sched(paused_until=NOW - HOUR),
        MIN,
        "baseline-interval",
    ),
    case(
        "pause-beats-the-max-clamp",
        sched(paused_until=NOW + 2 * HOUR, max_interval_ms=60_000),
        2 * HOUR,
        "paused",
    ),
    case(
        "pause-beats-an-earlier-baseline",
        sched(paused_until=NOW + 10 * SEC),
        10 * SEC,
        "paused",
    ),
    case(
        "pause-beats-a-past-one-shot",
        sched(paused_until=NOW + HOUR, **hints(at=NOW - HOUR)),
        HOUR,
        "paused",
    ),
    case(
        "pause-beats-cron-and-hints",
        sched(baseline_cron="* * * * *", paused_until=NOW + HOUR, **hints(interval=5 * SEC)),
        HOUR,
        "paused",
    ),
]


@pytest.mark.parametrize(("schedule", "expected", "source"), PAUSES)
def test_a_pause_strictly_after_now_wins_over_everything(
    schedule: EndpointSchedule, expected: datetime, source: str
) -> None:
    check(schedule, expected, source)


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, tzinfo=UTC)


# (cron, zone, now, the next two runs in UTC). Berlin's fold is 02:00-03:00 local, New
# York's 01:00-02:00; the gaps are 02:00-03:00 in both.
DST = [
    pytest.param(
        "30 2 * * *",
        "America/New_York",
        utc(2026, 3, 8, 5),
        [utc(2026, 3, 8, 7), utc(2026, 3, 9, 6, 30)],
        id="new-york-02:30-in-the-spring-gap-runs-at-03:00-EDT",
    ),
    pytest.param(
        "30 2 * * *",
        "Europe/Berlin",
        utc(2026, 3, 28, 23),
        [utc(2026, 3, 29, 1), utc(2026, 3, 30, 0, 30)],
        id="berlin-02:30-in-the-spring-gap-runs-at-03:00-CEST",
    ),
    pytest.param(
        "30 1 * * *",
        "America/New_York",
        utc(2026, 10, 31, 12),
        [utc(2026, 11, 1, 5, 30), utc(2026, 11, 2, 6, 30)],
        id="new-york-01:30-in-the-fall-fold-runs-once-at-the-first-pass",
    ),
    pytest.param(
        "30 1 * * *",
        "America/New_York",
        utc(2026, 11, 1, 6, 10),
        [utc(2026, 11, 2, 6, 30), utc(2026, 11, 3, 6, 30)],
        id="new-york-01:30-from-inside-the-second-pass-waits-for-tomorrow",
    ),
    pytest.param(
        "30 2 * * *",
        "Europe/Berlin",
        utc(2026, 10, 24, 12),
        [utc(2026, 10, 25, 0, 30), utc(2026, 10, 26, 1, 30)],
        id="berlin-02:30-in-the-fall-fold-runs-once-at-the-first-pass",
    ),
    pytest.param(
        "30 2 * * *",
        "Europe/Berlin",
        utc(2026, 10, 25, 1, 10),
        [utc(2026, 10, 26, 1, 30), utc(2026, 10, 27, 1, 30)],
        id="berlin-02:30-from-inside-the-second-pass-waits-for-tomorrow",
    ),
    pytest.param(
        "30 1 * * *",
        "Europe/Berlin",
        utc(2026, 10, 24, 12),
        [utc(2026, 10, 24, 23, 30), utc(2026, 10, 26, 0, 30)],
        id="berlin-01:30-is-outside-the-fold-and-runs-plainly",
    ),
    pytest.param(
        "30 1 * * *",
        "Europe/Berlin",
        utc(2026, 3, 28, 12),
        [utc(2026, 3, 29, 0, 30), utc(2026, 3, 29, 23, 30)],
        id="berlin-01:30-is-outside-the-gap-and-runs-plainly",
    ),
    pytest.param(
        "*/15 * * * *",
        "America/New_York",
        utc(2026, 3, 8, 6, 50),
        [utc(2026, 3, 8, 7), utc(2026, 3, 8, 7, 15)],
        id="new-york-every-15-from-01:50-EST-goes-to-03:00-EDT",
    ),
    pytest.param(
        "*/15 * * * *",
        "America/New_York",
        utc(2026, 11, 1, 5, 50),
        [utc(2026, 11, 1, 6), utc(2026, 11, 1, 6, 15)],
        id="new-york-every-15-runs-through-the-repeated-hour",
    ),
    pytest.param(
        "0 * * * *",
        "Europe/Berlin",
        utc(2026, 3, 29, 0, 30),
        [utc(2026, 3, 29, 1), utc(2026, 3, 29, 2)],
        id="berlin-hourly-from-01:30-CET-goes-to-03:00-CEST",
    ),
    pytest.param(
        "0 * * * *",
        "Europe/Berlin",
        utc(2026, 10, 25, 0, 30),
        [utc(2026, 10, 25, 1), utc(2026, 10, 25, 2)],
        id="berlin-hourly-runs-both-02:00s-of-the-fold",
    ),
]


@pytest.mark.parametrize(("cron", "zone", "now", "runs"), DST)
def test_cron_across_daylight_saving_follows_classic_cron(
    cron: str, zone: str, now: datetime, runs: list[datetime]
) -> None:
    schedule = sched(baseline_cron=cron, timezone=zone)
    seen = []
    for _ in runs:
        plan = plan_next_run(now, schedule)
        assert plan.source == "baseline-cron"
        seen.append(plan.next_run_at)
        now = plan.next_run_at
    assert seen == runs


TRANSITION_DAYS = [
    pytest.param("America/New_York", utc(2026, 3, 8), id="new-york-spring"),
    pytest.param("America/New_York", utc(2026, 11, 1), id="new-york-fall"),
    pytest.param("Europe/Berlin", utc(2026, 3, 29), id="berlin-spring"),
    pytest.param("Europe/Berlin", utc(2026, 10, 25), id="berlin-fall"),
]


def runs_during_one_day(cron: str, zone: str, day: datetime) -> list[datetime]:
    schedule, now, runs = sched(baseline_cron=cron, timezone=zone), day - HOUR, []
    while now < day + timedelta(days=1):
        now = plan_next_run(now, schedule).next_run_at
        runs.append(now)
    return runs


@pytest.mark.parametrize(("zone", "day"), TRANSITION_DAYS)
@pytest.mark.parametrize(
    ("cron", "step"), [("*/15 * * * *", 15 * MIN), ("0 * * * *", HOUR)], ids=["*/15", "hourly"]
)
def test_wildcard_hours_follow_elapsed_time_never_doubled_nor_stalled(
    zone: str, day: datetime, cron: str, step: timedelta
) -> None:
    runs = runs_during_one_day(cron, zone, day)
    assert {later - earlier for earlier, later in itertools.pairwise(runs)} == {step}


@pytest.mark.parametrize(("zone", "day"), TRANSITION_DAYS)
@pytest.mark.parametrize("cron", ["30 1 * * *", "30 2 * * *", "0 3 * * *"])
def test_a_fixed_wall_time_runs_exactly_once_on_a_transition_day(
    zone: str, day: datetime, cron: str
) -> None:
    local_day = (day + 12 * HOUR).astimezone(ZoneInfo(zone)).date()
    runs = runs_during_one_day(cron, zone, day - 12 * HOUR)
    assert len([run for run in runs if run.astimezone(ZoneInfo(zone)).date() == local_day]) == 1


def test_a_schedule_without_cron_or_interval_is_refused_with_a_reason() -> None:
    with pytest.raises(ValueError, match="neither a cron expression nor an interval"):
        plan_next_run(NOW, EndpointSchedule())


def test_the_schedule_fields_are_named_like_the_endpoint_fields() -> None:
    for field in dataclasses.fields(EndpointSchedule):
        if field.name == "tenant_min_interval_ms":  # a property: the tenant's floor
            assert isinstance(Endpoint.tenant_min_interval_ms, property)
            continue
        if field.name in POLICY_FIELDS:  # from the run policy (job and endpoint)
            continue
        assert Endpoint._meta.get_field(field.name).name == field.name


def test_from_endpoint_copies_every_schedule_field() -> None:
    endpoint = Endpoint(
        baseline_cron="0 9 * * 1-5",
        timezone="Europe/Berlin",
        min_interval_ms=1_000,
        max_interval_ms=9_000,
        ai_hint_interval_ms=5_000,
        ai_hint_next_run_at=NOW + MIN,
        ai_hint_expires_at=NOW + HOUR,
        paused_until=NOW + SEC,
        failure_count=3,
    )
    schedule = EndpointSchedule.from_endpoint(endpoint)
    for field in dataclasses.fields(EndpointSchedule):
        if field.name not in POLICY_FIELDS:  # those come from the run policy
            assert getattr(schedule, field.name) == getattr(endpoint, field.name), field.name


def test_every_source_is_an_endpoint_source_with_words_for_people() -> None:
    assert set(SOURCE_WORDS) == set(Source.values)


def test_decide_keeps_the_trail_of_candidates_and_steps() -> None:
    schedule = sched(min_interval_ms=30_000, **hints(interval=5 * SEC, at=NOW + 20 * SEC))
    decision = decide(NOW, schedule)
    assert [c.source for c in decision.candidates] == [
        "baseline-interval",
        "ai-interval",
        "ai-oneshot",
    ]
    assert decision.chosen.source == "ai-interval"
    assert decision.hints_fresh
    assert (decision.plan.next_run_at, decision.plan.source) == (NOW + 30 * SEC, "clamped-min")
    assert decision.steps == (
        "baseline: 2026-06-01 12:01:00 UTC, in 1 minute (baseline-interval)",
        "both hints fresh: the earlier wins (ai-interval), baseline ignored",
        "raised to the minimum interval (30 seconds)",
    )


def test_decide_says_when_hints_expired() -> None:
    decision = decide(NOW, sched(**hints(interval=5 * SEC, ttl=-SEC)))
    assert not decision.hints_fresh
    assert [c.source for c in decision.candidates] == ["baseline-interval"]
    assert "hints expired: ignored" in decision.steps


@pytest.mark.parametrize(
    ("schedule", "fragments"),
    [
        pytest.param(
            sched(failure_count=2),
            [
                "Next run in 4 minutes at 2026-06-01 12:04:00 UTC",
                "set by the baseline interval",
                "Baseline: every minute, backed off x4 after 2 failures.",
            ],
            id="backoff",
        ),
        pytest.param(
            sched(baseline_cron="0 9 * * 1-5", timezone="Europe/Berlin"),
            [
                "Next run in 19 hours at 2026-06-02 07:00:00 UTC",
                "set by the cron schedule",
                "Baseline: at 09:00 on Monday through Friday (Europe/Berlin).",
            ],
            id="cron",
        ),
        pytest.param(
            sched(min_interval_ms=30_000, **hints(interval=5 * SEC)),
            [
                "set by the minimum interval",
                "interval hint fresh: it overrides the baseline",
                "raised to the minimum interval (30 seconds)",
            ],
            id="hint-clamped",
        ),
        pytest.param(
            sched(**hints(at=NOW - MIN)),
            ["Next run now at 2026-06-01 12:00:00 UTC", "the one-shot time has passed"],
            id="past-one-shot",
        ),
        pytest.param(
            sched(paused_until=NOW + 2 * HOUR, **hints(interval=5 * SEC, ttl=-SEC)),
            [
                "set by a pause",
                "hints expired: ignored",
                "paused until 2026-06-01 14:00:00 UTC: pause wins",
            ],
            id="paused",
        ),
    ],
)
def test_explain_plan_says_when_and_why_in_words(
    schedule: EndpointSchedule, fragments: list[str]
) -> None:
    text = explain_plan(NOW, schedule)
    for fragment in fragments:
        assert fragment in text
    assert "baseline-" not in text.split(" Baseline:")[0]  # sources appear in words
