"""Schedules people can write: interval spellings, cron validation and plain-English readings."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from endpoints.schedules import (
    ScheduleError,
    describe_interval,
    describe_schedule,
    format_interval,
    next_cron_after,
    normalize_cron,
    parse_interval,
    validate_timezone,
)


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("90s", 90_000),
        ("5m", 300_000),
        ("1h30m", 5_400_000),
        ("1d", 86_400_000),
        ("1500", 1_500),
        ("250ms", 250),
        ("1h 30m", 5_400_000),
        ("  5m  ", 300_000),
        ("5 m", 300_000),
        ("1H", 3_600_000),
        ("1d2h3m4s5ms", 93_784_005),
        ("1m1ms", 60_001),
        (60_000, 60_000),
    ],
    ids=str,
)
def test_parse_interval_reads_units_and_plain_milliseconds(text: str | int, ms: int) -> None:
    assert parse_interval(text) == ms


@pytest.mark.parametrize(
    ("text", "fragments"),
    [
        ("5x", ["'5x': unknown unit 'x'; use s, m, h or d"]),
        ("", ["empty", "90s, 5m, 1h30m or 1d"]),
        ("   ", ["empty"]),
        ("abc", ["'abc' is not an interval", "e.g. 90s"]),
        ("5m30", ["'5m30': 30 has no unit", "use s, m, h or d"]),
        ("1.5h", ["'1.5h' is not an interval", "1h30m"]),
        ("-5m", ["'-5m' is not an interval"]),
        ("2h-", ["'2h-' is not an interval"]),
        ("5 minutes", ["unknown unit 'minutes'"]),
        (True, ["True is not an interval"]),
        # Digits to str.isdigit, not to int: a ValueError escaped (a traceback or a 500).
        ("\u00b2", ["'\u00b2' is not an interval", "e.g. 90s"]),
        ("1\u00b2", ["'1\u00b2' is not an interval"]),
    ],
    ids=repr,
)
def test_parse_interval_rejects_bad_spellings_with_a_fix(
    text: str | bool, fragments: list[str]
) -> None:
    with pytest.raises(ScheduleError) as caught:
        parse_interval(text)
    for fragment in fragments:
        assert fragment in str(caught.value)


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (1_000, "1s"),
        (90_000, "1m30s"),
        (5_400_000, "1h30m"),
        (86_400_000, "1d"),
        (1_500, "1s500ms"),
        (0, "0s"),
    ],
    ids=str,
)
def test_format_interval_picks_the_shortest_spelling(ms: int, text: str) -> None:
    assert format_interval(ms) == text


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=400 * 86_400_000))
def test_format_interval_round_trips_through_parse_interval(ms: int) -> None:
    assert parse_interval(format_interval(ms)) == ms


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 1_000), st.sampled_from(["d", "h", "m", "s", "ms"])),
        min_size=1,
        max_size=5,
    )
)
def test_parse_interval_sums_its_parts(parts: list[tuple[int, str]]) -> None:
    unit_ms = {"d": 86_400_000, "h": 3_600_000, "m": 60_000, "s": 1_000, "ms": 1}
    text = " ".join(f"{count}{unit}" for count, unit in parts)
    assert parse_interval(text) == sum(count * unit_ms[unit] for count, unit in parts)


@pytest.mark.parametrize(
    ("expr", "normal"),
    [
        ("@hourly", "0 * * * *"),
        ("@HOURLY", "0 * * * *"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@weekly", "0 0 * * 0"),
        ("@monthly", "0 0 1 * *"),
        ("@yearly", "0 0 1 1 *"),
        ("@annually", "0 0 1 1 *"),
        ("  0   9 * *  1-5 ", "0 9 * * 1-5"),
        ("0 0 29 2 *", "0 0 29 2 *"),
        ("0 9 * * MON-FRI", "0 9 * * MON-FRI"),
    ],
    ids=str,
)
def test_normalize_cron_expands_shorthands_and_tidies_spaces(expr: str, normal: str) -> None:
    assert normalize_cron(expr) == normal


@pytest.mark.parametrize(
    ("expr", "fragment"),
    [
        ("* * * * * *", "has 6 fields; cron needs 5"),
        ("* * * *", "has 4 fields"),
        ("garbage", "has 1 fields"),
        ("61 * * * *", "Bad minute"),
        ("0 24 * * *", "Bad hour"),
        ("0 0 30 2 *", "Bad day-of-month"),
        ("0 0 31 4 *", "Bad day-of-month"),
        ("0 0 * 13 *", "Bad month"),
        ("0 0 * * 8", "Bad day-of-week"),
        ("*/0 * * * *", "Bad minute"),
        ("@fortnightly", "unknown shorthand; use one of @annually"),
    ],
    ids=str,
)
def test_normalize_cron_rejects_expressions_that_cannot_run(expr: str, fragment: str) -> None:
    with pytest.raises(ScheduleError) as caught:
        normalize_cron(expr)
    assert fragment in str(caught.value)
    assert repr(expr) in str(caught.value)


@pytest.mark.parametrize(
    ("cron", "tz", "text"),
    [
        ("*/5 * * * *", "UTC", "every 5 minutes (UTC)"),
        ("0 9 * * 1-5", "Europe/Berlin", "at 09:00 on Monday through Friday (Europe/Berlin)"),
        ("0 9 * * MON-FRI", "Europe/Berlin", "at 09:00 on Monday through Friday (Europe/Berlin)"),
        ("@hourly", "UTC", "every hour (UTC)"),
        ("@daily", "America/New_York", "at 00:00 (America/New_York)"),
        ("0 0 * * 0", "UTC", "at 00:00 on Sunday (UTC)"),
        ("30 8 * * 6,0", "UTC", "at 08:30 on Saturday and Sunday (UTC)"),
        ("0 0 1 1 *", "UTC", "at 00:00 on day 1 of the month in January (UTC)"),
        ("15 14 1 * *", "UTC", "at 14:15 on day 1 of the month (UTC)"),
        ("0 12 * 6 *", "UTC", "at 12:00 in June (UTC)"),
        ("*/5 * * * 1", "UTC", "every 5 minutes on Monday (UTC)"),
    ],
    ids=str,
)
def test_describe_schedule_reads_cron_like_a_person(cron: str, tz: str, text: str) -> None:
    assert describe_schedule(baseline_cron=cron, timezone=tz) == text


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (1_000, "every second"),
        (30_000, "every 30 seconds"),
        (60_000, "every minute"),
        (300_000, "every 5 minutes"),
        (5_400_000, "every 90 minutes"),
        (7_200_000, "every 2 hours"),
        (86_400_000, "every day"),
        (1_500, "every 1s500ms"),
    ],
    ids=str,
)
def test_describe_schedule_reads_intervals_like_a_person(ms: int, text: str) -> None:
    assert describe_interval(ms) == text
    assert describe_schedule(baseline_interval_ms=ms) == text


def test_describe_schedule_without_a_schedule_says_so() -> None:
    assert describe_schedule() == "no schedule"


@pytest.mark.parametrize("name", ["UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata"])
def test_validate_timezone_accepts_iana_names(name: str) -> None:
    assert str(validate_timezone(name)) == name


@pytest.mark.parametrize(
    "name", ["Mars/Olympus", "", "utc", "../etc/passwd", "Europe/berlin", "localtime"]
)
def test_validate_timezone_rejects_other_names_with_examples(name: str) -> None:
    with pytest.raises(ScheduleError, match="is not an IANA time zone; use a name like UTC"):
        validate_timezone(name)


@pytest.mark.parametrize(
    ("now", "expected"),
    [
        (datetime(2026, 1, 1, 6, 59, 59, 999_999, tzinfo=UTC), datetime(2026, 1, 1, 7, tzinfo=UTC)),
        (datetime(2026, 1, 1, 7, tzinfo=UTC), datetime(2026, 1, 2, 7, tzinfo=UTC)),
        (datetime(2026, 1, 1, 7, 0, 0, 500_000, tzinfo=UTC), datetime(2026, 1, 2, 7, tzinfo=UTC)),
    ],
    ids=["just-before", "exactly-at", "just-after"],
)
def test_next_cron_after_is_strictly_after_now(now: datetime, expected: datetime) -> None:
    assert next_cron_after("0 7 * * *", "UTC", now) == expected


@pytest.mark.parametrize(
    ("expr", "tz", "start", "end"),
    [
        ("30 1 * * *", "America/New_York", datetime(2026, 11, 1, 4), datetime(2026, 11, 1, 8)),
        ("30 2 * * *", "Europe/Berlin", datetime(2026, 10, 24, 23), datetime(2026, 10, 25, 3)),
        ("*/15 * * * *", "America/New_York", datetime(2026, 11, 1, 4), datetime(2026, 11, 1, 8)),
        ("*/7 1-3 * * *", "Europe/Berlin", datetime(2026, 10, 24, 23), datetime(2026, 10, 25, 3)),
        ("45 1 * * *", "Australia/Lord_Howe", datetime(2026, 4, 4, 13), datetime(2026, 4, 4, 17)),
    ],
    ids=str,
)
def test_next_cron_after_never_returns_the_past_from_inside_a_fold(
    expr: str, tz: str, start: datetime, end: datetime
) -> None:
    # cronsim ignores fold=1, so from the repeated hour it could yield the hour's first pass.
    now = start.replace(tzinfo=UTC)
    while now < end.replace(tzinfo=UTC):
        assert next_cron_after(expr, tz, now) > now, now
        now += timedelta(seconds=97)
