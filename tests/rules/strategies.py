"""Hypothesis strategies shared by the governor's property tests: bounded aware-UTC
moments, crons and zones people use, window sets (inside the DST hours, over midnight,
touching), and whole situations (a moment and an endpoint's schedule, with or without a run
policy)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from hypothesis import strategies as st

from endpoints.governor import (
    EndpointSchedule,
)
from endpoints.windows import Window

DAY_MS = 86_400_000


WINDOW_SETS = [
    (),
    (Window(2 * 60, 4 * 60),),  # 02:00-04:00 daily (inside the DST change hours)
    (Window(22 * 60, 6 * 60, frozenset({5, 6})),),  # over midnight, weekends
    (Window(0, 12 * 60), Window(12 * 60, 23 * 60 + 59)),  # windows that touch
]


def inside(at: datetime, zone: ZoneInfo, windows: tuple[Window, ...]) -> bool:
    """Whether ``at`` is inside one of ``windows``, read off the wall clock the plain way
    (the window that started today, or yesterday over midnight): the oracle the
    bisection of ``endpoints.windows`` is checked against."""
    local = at.astimezone(zone)
    minute = local.hour * 60 + local.minute + (local.second + local.microsecond / 1e6) / 60
    for window in windows:
        length = (window.end - window.start) % (24 * 60)
        for back in (0, 1):
            weekday = (local.weekday() - back) % 7
            if window.days and weekday not in window.days:
                continue
            if 0 <= minute + back * 24 * 60 - window.start < length:
                return True
    return False


moments = st.datetimes(
    min_value=datetime(2025, 1, 1), max_value=datetime(2028, 12, 31), timezones=st.just(UTC)
)


offsets = st.timedeltas(min_value=timedelta(days=-2), max_value=timedelta(days=2))


bounds = st.one_of(st.none(), st.just(0), st.integers(1_000, 2 * DAY_MS))


crons = st.sampled_from(
    ["* * * * *", "*/15 * * * *", "0 * * * *", "30 2 * * *", "30 1 * * *", "0 9 * * 1-5"]
)


zones = st.sampled_from(["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe"])


@st.composite
def schedules(draw: st.DrawFn, now: datetime) -> EndpointSchedule:
    """Any schedule the database accepts, with hints and pauses placed around ``now``."""

    def around() -> datetime | None:
        return draw(st.one_of(st.none(), offsets.map(lambda delta: now + delta)))

    use_cron = draw(st.booleans())
    return EndpointSchedule(
        baseline_cron=draw(crons) if use_cron else "",
        timezone=draw(zones),
        baseline_interval_ms=None if use_cron else draw(st.integers(1_000, 7 * DAY_MS)),
        min_interval_ms=draw(bounds),
        max_interval_ms=draw(bounds),
        ai_hint_interval_ms=draw(st.one_of(st.none(), st.integers(1_000, 2 * DAY_MS))),
        ai_hint_next_run_at=around(),
        ai_hint_expires_at=around(),
        paused_until=around(),
        failure_count=draw(st.integers(0, 40)),
    )


@st.composite
def situations(draw: st.DrawFn) -> tuple[datetime, EndpointSchedule]:
    now = draw(moments)
    return now, draw(schedules(now))


@st.composite
def policy_situations(draw: st.DrawFn) -> tuple[datetime, EndpointSchedule]:
    """``situations`` with a run policy too: the tenant's floor, a backoff cap, a jitter
    offset, a retry in its slot, a blackout."""
    now, schedule = draw(situations())
    return now, dataclasses.replace(
        schedule,
        tenant_min_interval_ms=draw(st.one_of(st.none(), st.integers(1_000, 600_000))),
        backoff_cap_ms=draw(st.one_of(st.none(), st.integers(1_000, 30 * DAY_MS))),
        jitter_offset_ms=draw(st.integers(0, 3_600_000)),
        retry_at=draw(st.one_of(st.none(), offsets.map(lambda delta: now + delta))),
        retry_attempt=draw(st.integers(1, 9)),
        blackout=draw(st.sampled_from(WINDOW_SETS)),
    )
