"""A run policy's calendar: the dates an endpoint never runs on, in local dates of its
zone: explicit dates and ranges (``exclude_dates``) and the public holidays of a country
and subdivision (``holidays``, from the ``holidays`` package's offline data). Pure: no
models, no clock.

Planning stays cheap whatever the calendar: the closed days of a calendar are computed
once per calendar and year (cached by content: the explicit ranges and two years of
holidays, merged into sorted ranges of days), and a plan finds the first open day by
bisection, skipping a whole closed range per step, never walking day by day. The open
day starts at its local midnight (the first instant of that wall time, DST gaps
included: ``windows.first_instant_at``).

The ``holidays`` package is imported on first use, so an endpoint without holidays (the
common case, and the hot path) never pays for its import.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass
from datetime import date, datetime, time
from functools import lru_cache
from typing import Any
from zoneinfo import ZoneInfo

from endpoints.windows import first_instant_at

MAX_EXCLUDE_DATES = 50
MAX_RANGE_DAYS = 366
MIN_YEAR, MAX_YEAR = 2000, 9000
# Steps of one search for an open day: each passes a whole closed range, or a year.
MAX_STEPS = 80
_DAY = re.compile(r"\d{4}-\d{2}-\d{2}\Z")
_EXAMPLE = '["2026-12-24..2026-12-26", "2027-01-01"]'
_HOLIDAYS_EXAMPLE = '{"country": "DE", "subdivision": "BY"}'

DayRange = tuple[date, date]  # first and last day, both closed


@dataclass(frozen=True)
class Calendar:
    """The closed days of a policy: explicit ranges and a country's public holidays."""

    excluded: tuple[DayRange, ...] = ()
    country: str = ""
    subdivision: str = ""

    @property
    def region(self) -> str:
        return f"{self.country}-{self.subdivision}" if self.subdivision else self.country

    def words(self) -> str:
        parts = []
        if self.excluded:
            parts.append(", ".join(range_words(item) for item in self.excluded[:3]))
            if len(self.excluded) > 3:
                parts[-1] += f" and {len(self.excluded) - 3} more"
        if self.country:
            parts.append(f"public holidays of {self.region}")
        return "; ".join(parts)


def range_words(item: DayRange) -> str:
    first, last = item
    return first.isoformat() if first == last else f"{first.isoformat()}..{last.isoformat()}"


def exclude_dates_problem(item: Any) -> str:
    """What is wrong with a stored ``exclude_dates`` list, in words; "" when usable."""
    if not isinstance(item, list) or len(item) > MAX_EXCLUDE_DATES:
        return f"a list of at most {MAX_EXCLUDE_DATES} dates or ranges, e.g. {_EXAMPLE}."
    for number, text in enumerate(item, 1):
        if not isinstance(text, str) or len(text) > 30:
            return f"entry {number}: a date YYYY-MM-DD or a range FIRST..LAST, e.g. {_EXAMPLE}."
        ends = text.split("..")
        if len(ends) > 2 or not all(_DAY.match(end) for end in ends):
            return f"entry {number}: {text!r} is not a date YYYY-MM-DD or a range FIRST..LAST."
        try:
            first, last = date.fromisoformat(ends[0]), date.fromisoformat(ends[-1])
        except ValueError:
            return f"entry {number}: {text!r} is not a date of the calendar."
        if not (MIN_YEAR <= first.year <= MAX_YEAR and MIN_YEAR <= last.year <= MAX_YEAR):
            return f"entry {number}: {text!r} is not between the years {MIN_YEAR} and {MAX_YEAR}."
        if last < first:
            return f"entry {number}: {text!r} ends before it starts; give FIRST..LAST in order."
        if (last - first).days >= MAX_RANGE_DAYS:
            return (
                f"entry {number}: {text!r} is longer than {MAX_RANGE_DAYS} days; use "
                "active_from / active_until for a long rest."
            )
    return ""


def holidays_problem(item: Any) -> str:
    """What is wrong with a stored ``holidays`` object, in words; "" when usable."""
    if item is None:
        return ""
    if not isinstance(item, dict) or not {"country"} <= set(item) <= {"country", "subdivision"}:
        return f"an object with a country and optionally a subdivision, e.g. {_HOLIDAYS_EXAMPLE}."
    country, subdivision = item["country"], item.get("subdivision")
    supported = _supported()
    if isinstance(country, bool):  # YAML reads NO (Norway) as false
        return 'country is true or false, not a code: in YAML quote it, e.g. country: "NO".'
    if not isinstance(country, str) or country not in supported:
        return (
            f"country {str(country)[:20]!r} is not a country the holidays data knows; give an "
            'ISO 3166-1 alpha-2 code such as "DE", "US" or "FR".'
        )
    if subdivision is None:
        return ""
    if not isinstance(subdivision, str) or subdivision not in supported[country]:
        known = ", ".join(supported[country][:40]) or "none"
        return f"subdivision {str(subdivision)[:20]!r} is not one of {country}'s: {known}."
    return ""


@lru_cache(maxsize=1)
def _supported() -> dict[str, list[str]]:
    import holidays

    return {
        code: list(subdivisions)
        for code, subdivisions in holidays.list_supported_countries().items()
    }


def parse_exclude_dates(items: list[str]) -> tuple[DayRange, ...]:
    """Validated ``exclude_dates``, as ranges of days."""
    parsed = []
    for text in items:
        ends = text.split("..")
        parsed.append((date.fromisoformat(ends[0]), date.fromisoformat(ends[-1])))
    return tuple(parsed)


def parse_holidays(item: dict[str, Any] | None) -> tuple[str, str]:
    """A validated ``holidays`` object as (country, subdivision); ("", "") for none."""
    if not item:
        return "", ""
    return item["country"], item.get("subdivision") or ""


@lru_cache(maxsize=256)
def _holiday_names(country: str, subdivision: str, year: int) -> dict[date, str]:
    """A country's public holidays of one year (the package's default category)."""
    import holidays

    # Names in English whatever the process's locale (the country's own language, or the
    # locale, would pick one per machine: "Erster Weihnachtstag" for "Christmas Day").
    found = holidays.country_holidays(
        country, subdiv=subdivision or None, years=year, language="en_US"
    )
    return {day: str(name) for day, name in found.items()}


@lru_cache(maxsize=1024)
def _closed(calendar: Calendar, year: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The closed days known for planning from ``year``: every explicit range and the
    holidays of ``year`` and the next, merged into sorted ranges of day ordinals
    ``[starts[i], ends[i]]``. Computed once per calendar and year."""
    ranges = [(first.toordinal(), last.toordinal()) for first, last in calendar.excluded]
    if calendar.country:
        for each in (year, year + 1):
            days = _holiday_names(calendar.country, calendar.subdivision, each)
            ranges += [(day.toordinal(), day.toordinal()) for day in days]
    merged: list[list[int]] = []
    for first, last in sorted(ranges):
        if merged and first <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], last)
        else:
            merged.append([first, last])
    return tuple(item[0] for item in merged), tuple(item[1] for item in merged)


def next_open_day(calendar: Calendar, day: date) -> date | None:
    """The first day at or after ``day`` that the calendar leaves open; None past the
    last year planned (``MAX_YEAR``) or after ``MAX_STEPS`` closed ranges in a row."""
    for _ in range(MAX_STEPS):
        if day.year > MAX_YEAR:
            return None
        starts, ends = _closed(calendar, day.year)
        ordinal = day.toordinal()
        index = bisect_right(starts, ordinal) - 1
        if index < 0 or ordinal > ends[index]:
            return day
        day = date.fromordinal(ends[index] + 1)
    return None


def is_open(at: datetime, zone: ZoneInfo, calendar: Calendar) -> bool:
    day = at.astimezone(zone).date()
    return next_open_day(calendar, day) == day


def next_open(at: datetime, zone: ZoneInfo, calendar: Calendar) -> datetime | None:
    """``at`` if its local date in ``zone`` is open, else the first instant of the next
    open day (its local midnight, or the end of a DST gap there); None when there is none."""
    day = at.astimezone(zone).date()
    found = next_open_day(calendar, day)
    if found is None or found == day:
        return None if found is None else at
    return first_instant_at(datetime.combine(found, time()), zone)


def closed_reason(calendar: Calendar, day: date) -> str:
    """Why ``day`` is closed, in words ("" when it is open)."""
    for item in calendar.excluded:
        if item[0] <= day <= item[1]:
            return f"an excluded date ({range_words(item)})"
    if calendar.country:
        name = _holiday_names(calendar.country, calendar.subdivision, day.year).get(day)
        if name:
            return f"a public holiday in {calendar.region} ({name})"
    return ""
