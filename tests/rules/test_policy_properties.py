"""Whatever run policy validation accepts, at the edges of every range, the governor plans
without raising: the policy's keys (windows, active period, one-off, jitter, backoff cap,
moments in the years 2000 and 9000 with any offset) over schedules at their own bounds."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from endpoints.governor import EndpointSchedule, decide, explain_plan, preview_runs
from endpoints.policies import (
    MAX_JITTER_MS,
    jitter_offset_ms,
    policy_problems,
    resolve_policy,
)
from endpoints.schedules import MAX_PLANNABLE_MS
from endpoints.windows import DAYS

DAY_MS = 86_400_000
NOW = st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1)).map(
    lambda at: at.replace(tzinfo=UTC)
)
OFFSET = st.integers(-(23 * 60 + 59), 23 * 60 + 59).map(
    lambda minutes: f"{'-' if minutes < 0 else '+'}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"
)
MOMENT = st.one_of(
    st.sampled_from(["2000-01-01T00:00:00", "9000-12-31T23:59:59", "2026-03-29T02:30:00"]),
    st.datetimes(min_value=datetime(2000, 1, 2), max_value=datetime(2100, 1, 1)).map(
        lambda at: at.isoformat(timespec="seconds")
    ),
)
CLOCK = st.integers(0, 24 * 60 - 1).map(lambda m: f"{m // 60:02d}:{m % 60:02d}")
WINDOW = st.fixed_dictionaries(
    {"start": CLOCK, "end": CLOCK},
    optional={"days": st.lists(st.sampled_from(DAYS), max_size=7, unique=True)},
)
EDGE_MS = st.one_of(st.sampled_from([1_000, DAY_MS, MAX_PLANNABLE_MS]), st.integers(1_000, DAY_MS))
POLICY: Any = st.fixed_dictionaries(
    {},
    optional={
        "jitter_ms": st.one_of(st.sampled_from([0, MAX_JITTER_MS]), st.integers(0, MAX_JITTER_MS)),
        "backoff_cap_ms": st.one_of(st.none(), st.sampled_from([1_000, 366 * DAY_MS])),
        "blackout": st.lists(WINDOW, max_size=3),
        "allowed": st.lists(WINDOW, max_size=3),
        "active_from": st.tuples(MOMENT, OFFSET).map("".join),
        "active_until": st.tuples(MOMENT, OFFSET).map("".join),
        "run_once_at": st.tuples(MOMENT, OFFSET).map("".join),
    },
)
CRONS = st.sampled_from(
    ["* * * * *", "0 0 29 2 *", "30 2 * * *", "0 9 * * 1-5", "0 0 1 1 *", "*/7 * * * *"]
)
ZONES = st.sampled_from(
    ["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Pacific/Chatham"]
)


@st.composite
def schedules(draw: st.DrawFn) -> tuple[datetime, EndpointSchedule]:
    now = draw(NOW)
    policy = draw(POLICY)
    if policy_problems(policy):
        policy = {}
    resolved = resolve_policy(None, policy)
    use_cron = draw(st.booleans())
    schedule = EndpointSchedule(
        baseline_cron=draw(CRONS) if use_cron else "",
        timezone=draw(ZONES),
        baseline_interval_ms=None if use_cron else draw(EDGE_MS),
        min_interval_ms=draw(st.one_of(st.none(), EDGE_MS)),
        max_interval_ms=draw(st.one_of(st.none(), EDGE_MS)),
        failure_count=draw(st.integers(0, 40)),
        tenant_min_interval_ms=draw(st.one_of(st.none(), EDGE_MS)),
        paused_until=draw(st.one_of(st.none(), st.just(now + timedelta(days=365)))),
        backoff_cap_ms=resolved.backoff_cap_ms,
        jitter_offset_ms=jitter_offset_ms(draw(st.integers(1, 10**6)), resolved.jitter_ms),
        blackout=resolved.blackout,
        allowed=resolved.allowed,
        active_from=resolved.active_from,
        active_until=resolved.active_until,
        run_once_at=resolved.run_once_at,
    )
    return now, schedule


@settings(max_examples=400, deadline=None)
@given(schedules())
def test_every_policy_validation_accepts_is_planned_explained_and_previewed(
    situation: tuple[datetime, EndpointSchedule],
) -> None:
    now, schedule = situation
    plan = decide(now, schedule).plan
    assert plan.next_run_at is None or plan.next_run_at >= now
    assert explain_plan(now, schedule)
    for run in preview_runs(now, schedule, 5):
        assert run.next_run_at >= now
