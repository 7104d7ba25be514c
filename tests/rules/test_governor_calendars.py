"""Run-policy calendars (issue 34): dates and ranges excluded, and public holidays of a
country and subdivision, in local dates of the endpoint's zone, DST correct, bounded,
validated in words, and planned by bisection over closed ranges computed once per
calendar and year. Pure: no database."""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from endpoints import calendars
from endpoints.calendars import MAX_EXCLUDE_DATES, Calendar, next_open, next_open_day
from endpoints.governor import (
    BASELINE_CRON,
    CALENDAR,
    RETRY,
    EndpointSchedule,
    decide,
    explain_plan,
    preview_runs,
)
from endpoints.policies import policy_problems, stored_policy

BERLIN = ZoneInfo("Europe/Berlin")
BAVARIA = {"holidays": {"country": "DE", "subdivision": "BY"}}


def schedule(policy: dict[str, Any], **fields: Any) -> EndpointSchedule:
    values: dict[str, Any] = {"timezone": "Europe/Berlin", **fields}
    if "baseline_cron" not in values and "baseline_interval_ms" not in values:
        values["baseline_cron"] = "0 9 * * *"
    resolved = stored_policy({}, policy)
    return EndpointSchedule(
        calendar=resolved.calendar, allowed=resolved.allowed, blackout=resolved.blackout, **values
    )


def local_days(plans: list[Any], zone: ZoneInfo = BERLIN) -> list[str]:
    return [f"{plan.next_run_at.astimezone(zone):%m-%d %H:%M}" for plan in plans]


def test_a_bavarian_daily_cron_skips_christmas_new_year_and_epiphany() -> None:
    now = datetime(2026, 12, 23, 12, 0, tzinfo=UTC)
    plans = preview_runs(now, schedule(BAVARIA), 12)
    assert local_days(plans) == [
        "12-24 09:00",  # Christmas Eve is no public holiday in Bavaria
        "12-27 09:00",  # 25th and 26th skipped
        "12-28 09:00",
        "12-29 09:00",
        "12-30 09:00",
        "12-31 09:00",
        "01-02 09:00",  # New Year's Day
        "01-03 09:00",
        "01-04 09:00",
        "01-05 09:00",
        "01-07 09:00",  # Epiphany, a holiday in Bavaria, not in Berlin
        "01-08 09:00",
    ]
    assert [plan.source for plan in plans[:2]] == [BASELINE_CRON, CALENDAR]
    berlin = preview_runs(now, schedule({"holidays": {"country": "DE", "subdivision": "BE"}}), 12)
    assert "01-06 09:00" in local_days(berlin)


def test_explain_names_the_holiday_in_words() -> None:
    text = explain_plan(datetime(2026, 12, 24, 9, 0, tzinfo=UTC), schedule(BAVARIA))
    assert "set by the calendar (an excluded date or a public holiday)" in text
    assert "2026-12-25 is a public holiday in DE-BY (Christmas Day) (Europe/Berlin)" in text
    assert "moved to 2026-12-27 08:00:00 UTC" in text


def test_excluded_dates_and_ranges_are_local_dates_of_the_zone() -> None:
    policy = {"exclude_dates": ["2026-12-24..2026-12-26", "2027-01-01"]}
    # 23:30 UTC on the 23rd is already the 24th in Berlin: closed, moved to the 27th.
    late = datetime(2026, 12, 23, 23, 30, tzinfo=UTC)
    hourly = schedule(policy, baseline_cron="", baseline_interval_ms=3_600_000)
    decision = decide(late, hourly)
    assert decision.plan.source == CALENDAR
    assert decision.plan.next_run_at == datetime(2026, 12, 26, 23, 0, tzinfo=UTC)  # 00:00 CET
    assert "an excluded date (2026-12-24..2026-12-26)" in " ".join(decision.steps)
    # The same instant is still the 23rd in New York: it runs.
    new_york = schedule(policy, baseline_cron="", baseline_interval_ms=3_600_000,
                        timezone="America/New_York")  # fmt: skip
    assert decide(late, new_york).plan.source != CALENDAR


def test_an_open_day_that_starts_in_a_dst_gap_opens_at_the_gap_end() -> None:
    # Havana springs forward at midnight: 2026-03-08 00:00 does not exist there.
    havana = ZoneInfo("America/Havana")
    cal = Calendar(((date(2026, 3, 7), date(2026, 3, 7)),))
    opened = next_open(datetime(2026, 3, 7, 12, 0, tzinfo=havana), havana, cal)
    assert opened is not None
    local = opened.astimezone(havana)
    assert (local.date(), local.hour) == (date(2026, 3, 8), 1)  # 01:00 CDT, the gap's end


def test_a_retry_on_a_closed_day_stays_a_retry() -> None:
    now = datetime(2026, 12, 24, 22, 0, tzinfo=UTC)  # 23:00 in Berlin on the 24th
    decision = decide(
        now,
        schedule({"exclude_dates": ["2026-12-25"]}, retry_at=now.replace(hour=23, minute=30),
                 retry_attempt=2),
    )  # fmt: skip
    assert decision.plan.source == RETRY


def test_windows_and_calendar_agree_after_moving_in_turn() -> None:
    # Allowed on Mondays only, and the Monday after Christmas excluded: the next Monday.
    policy = {
        "allowed": [{"start": "08:00", "end": "10:00", "days": ["mon"]}],
        "exclude_dates": ["2026-12-28"],
    }
    now = datetime(2026, 12, 23, 12, 0, tzinfo=UTC)
    plan = decide(now, schedule(policy, baseline_cron="", baseline_interval_ms=3_600_000)).plan
    assert plan.next_run_at is not None
    assert f"{plan.next_run_at.astimezone(BERLIN):%Y-%m-%d %H:%M}" == "2027-01-04 08:00"


def test_closed_days_are_computed_once_per_calendar_and_year_and_skipped_whole() -> None:
    calendars._closed.cache_clear()
    ranges = [f"2027-{month:02d}-01..2027-{month:02d}-27" for month in range(1, 13)]
    cal = stored_policy({}, {"exclude_dates": ranges, **BAVARIA}).calendar
    assert cal is not None
    for _ in range(100):
        assert next_open_day(cal, date(2027, 1, 1)) == date(2027, 1, 28)
        assert next_open_day(cal, date(2026, 12, 25)) == date(2026, 12, 27)
    info = calendars._closed.cache_info()
    assert info.misses == 2  # 2026 and 2027, each once


def test_a_search_that_finds_no_open_day_ends_with_a_step_never_a_loop() -> None:
    # Only on Christmas Day, and Christmas Day is a holiday: never.
    christmas = schedule(BAVARIA, baseline_cron="0 9 25 12 *")
    decision = decide(datetime(2026, 12, 1, tzinfo=UTC), christmas)
    assert decision.plan.next_run_at is None
    assert "no open day was found (public holidays of DE-BY, Europe/Berlin)" in decision.steps[-1]


@pytest.mark.parametrize(
    ("policy", "words"),
    [
        ({"exclude_dates": "2026-12-24"}, "exclude_dates: a list of at most 50 dates or ranges"),
        ({"exclude_dates": ["2026-13-01"]}, "entry 1: '2026-13-01' is not a date of the calendar"),
        ({"exclude_dates": ["24.12.2026"]}, "is not a date YYYY-MM-DD or a range FIRST..LAST"),
        ({"exclude_dates": ["2026-12-26..2026-12-24"]}, "ends before it starts"),
        ({"exclude_dates": ["2026-01-01..2027-06-01"]}, "is longer than 366 days"),
        ({"exclude_dates": ["1999-12-31"]}, "is not between the years 2000 and 9000"),
        ({"exclude_dates": ["2026-01-01"] * (MAX_EXCLUDE_DATES + 1)}, "at most 50"),
        ({"holidays": {"country": "XX"}}, "country 'XX' is not a country the holidays data"),
        ({"holidays": {"country": "DE", "subdivision": "ZZ"}}, "is not one of DE's: BB, BE"),
        ({"holidays": {"country": "DE", "city": "Munich"}}, "an object with a country"),
        ({"holidays": "DE"}, "an object with a country"),
    ],
)
def test_calendar_keys_are_validated_in_words(policy: dict[str, Any], words: str) -> None:
    assert words in " ".join(policy_problems(policy))


def test_calendar_keys_resolve_job_defaults_and_endpoint_overrides() -> None:
    job = {**BAVARIA, "exclude_dates": ["2026-12-24"]}
    policy = stored_policy(job, {"exclude_dates": []})
    assert policy.calendar == Calendar((), "DE", "BY")
    assert stored_policy(job, {"holidays": None}).calendar == Calendar(
        ((date(2026, 12, 24), date(2026, 12, 24)),)
    )
    assert stored_policy({}, {}).calendar is None


@pytest.mark.parametrize(
    ("policy", "words"),
    [
        ({"follow_ups": "a/b"}, "follow_ups: a list of at most 10 follow-ups"),
        ({"follow_ups": [{"endpoint": "b"}]}, "follow-up 1: endpoint is a name job/endpoint"),
        ({"follow_ups": [{"endpoint": "a/b", "on": "done"}]}, "on is one of success, failure"),
        ({"follow_ups": [{"endpoint": "a/b"}, {"endpoint": "a/b"}]}, "a/b is named twice"),
        ({"follow_ups": [{"endpoint": "a/b", "when": "x"}]}, "give endpoint (and optionally on)"),
        ({"overlap": "allow"}, 'overlap: either "wait" (the default), "skip", or {"allow": N}'),
        ({"overlap": {"allow": 0}}, 'a whole number from 1 to 10, e.g. {"allow": 3}; got 0.'),
        ({"overlap": {"allow": 11}}, "overlap: allow is how many calls of the endpoint may be"),
        ({"overlap": {"allow": "3"}}, 'from 1 to 10, e.g. {"allow": 3}; got "3".'),
        ({"overlap": {"allow": True}}, "got true."),
        ({"overlap": {"allow": 2, "max": 3}}, 'overlap: either "wait" (the default)'),
        (
            {"overlap": {"allow": 2}, "retry_attempts": 3},
            'set retry_attempts to 1 (it is 3), or use overlap "wait" to keep the retries.',
        ),
    ],
)
def test_follow_up_and_overlap_keys_are_validated_in_words(
    policy: dict[str, Any], words: str
) -> None:
    assert words in " ".join(policy_problems(policy))


def test_follow_ups_and_overlap_resolve_to_the_typed_policy() -> None:
    policy = stored_policy(
        {"overlap": "skip"},
        {"follow_ups": [{"endpoint": "a/b"}, {"endpoint": "a/c", "on": "failure"}]},
    )
    assert policy.overlap == "skip"
    assert [
        (rule.endpoint, rule.wanted(True), rule.wanted(False)) for rule in policy.follow_ups
    ] == [
        ("a/b", True, False),
        ("a/c", False, True),
    ]
    assert stored_policy({}, {}).overlap == "wait" and stored_policy({}, {}).follow_ups == ()


def test_overlap_allow_resolves_to_its_number_of_calls_in_flight() -> None:
    assert policy_problems({"overlap": {"allow": 1}}) == []
    assert policy_problems({"overlap": {"allow": 10}, "retry_attempts": 1}) == []
    policy = stored_policy({"overlap": "skip"}, {"overlap": {"allow": 3}})
    assert (policy.overlap, policy.allow, policy.problem) == ("allow", 3, "")
    assert (stored_policy({}, {}).allow, stored_policy({"overlap": "skip"}, {}).allow) == (1, 1)
    # A job's retries under an endpoint's allowance: the two cannot be used together.
    mixed = stored_policy({"retry_attempts": 3}, {"overlap": {"allow": 2}})
    assert (mixed.overlap, mixed.allow) == ("wait", 1) and "retry_attempts" in mixed.problem
