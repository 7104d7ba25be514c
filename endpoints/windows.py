"""A run policy's time windows: the hours of the week an endpoint may run (``allowed``)
and may not (``blackout``), in local time in its zone. Pure: no models, no clock.

A window is a start and an end on the clock and the weekdays it starts on; one that ends
before it starts runs over midnight. The windows of a policy are turned once (cached by
content) into its *free week*: the minutes of a week inside some allowed window (any
minute, without them) and outside every blackout, as sorted intervals. A plan then finds
the first free instant at or after a time by bisection: one lookup whatever the windows,
and one more for each daylight-saving gap that swallows an opening (at most a few). The
original searched window by window, day by day, which made a valid policy with one free
minute a week cost ~280 steps per plan (issue 32).

The week is wall-clock minutes: a DST change shifts no window. A free interval that
starts at a wall time a spring-forward gap skips starts at the gap's end, if that is
still inside it; in a fall-back fold a time is the first of its two instants, unless that
one is already past.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta
from functools import lru_cache
from typing import Any
from zoneinfo import ZoneInfo

DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
MAX_WINDOWS = 20
DAY_MINUTES = 24 * 60
WEEK_MINUTES = 7 * DAY_MINUTES
_CLOCK = re.compile(r"([01]\d|2[0-3]):([0-5]\d)\Z")
_EXAMPLE = '[{"start": "02:00", "end": "04:00", "days": ["sat", "sun"]}]'


@dataclass(frozen=True)
class Window:
    """A recurring window of local time: minutes after midnight, and the weekdays it
    starts on (0 = Monday; empty = every day)."""

    start: int
    end: int
    days: frozenset[int] = frozenset()

    def words(self) -> str:
        days = ",".join(DAYS[d] for d in sorted(self.days)) if self.days else "daily"
        return f"{_hhmm(self.start)}-{_hhmm(self.end)} {days}"


def _hhmm(minutes: int) -> str:
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


def windows_problem(item: Any) -> str:
    """What is wrong with a stored list of windows, in words; "" when it is usable."""
    if not isinstance(item, list) or len(item) > MAX_WINDOWS:
        return f"a list of at most {MAX_WINDOWS} windows, e.g. {_EXAMPLE}."
    for number, window in enumerate(item, 1):
        if not isinstance(window, dict) or not {"start", "end"} <= set(window) <= {
            "start",
            "end",
            "days",
        }:
            return f"window {number}: give start and end (and optionally days), e.g. {_EXAMPLE}."
        for edge in ("start", "end"):
            if not isinstance(window[edge], str) or not _CLOCK.match(window[edge]):
                return f"window {number}: {edge} is a time of day as HH:MM (00:00-23:59)."
        if window["start"] == window["end"]:
            return f"window {number}: start and end are the same; give a window of some length."
        days = window.get("days", [])
        # Bounded by the week: each day at most once, so no list is longer than seven.
        if (
            not isinstance(days, list)
            or not all(isinstance(day, str) and day in DAYS for day in days)
            or len(set(days)) != len(days)
        ):
            return f"window {number}: days is a list of {', '.join(DAYS)}, each at most once."
    return ""


def parse_window(raw: dict[str, Any]) -> Window:
    """A window validated by ``windows_problem``."""

    def minutes(text: str) -> int:
        hours, mins = text.split(":")
        return int(hours) * 60 + int(mins)

    days = frozenset(DAYS.index(day) for day in raw.get("days", []))
    return Window(minutes(raw["start"]), minutes(raw["end"]), days)


def _week(windows: tuple[Window, ...]) -> bytearray:
    """The minutes of a week (Monday 00:00 = 0) that ``windows`` cover: at each, 1 + the
    index of the first window covering it, or 0."""
    covered = bytearray(WEEK_MINUTES)
    for index in reversed(range(len(windows))):  # the first window's mark is written last
        window = windows[index]
        length = (window.end - window.start) % DAY_MINUTES
        for day in window.days or range(7):
            first = day * DAY_MINUTES + window.start
            for begin, stop in (
                (first, first + length),
                (first - WEEK_MINUTES, first + length - WEEK_MINUTES),
            ):
                low, high = max(begin, 0), min(stop, WEEK_MINUTES)
                if low < high:
                    covered[low:high] = bytes([index + 1]) * (high - low)
    return covered


@dataclass(frozen=True)
class FreeWeek:
    """The minutes of the week a policy's windows leave to run in, as sorted half-open
    intervals ``[starts[i], ends[i])`` of wall-clock minutes, and which blackout window
    (if any) covers each minute, for the words."""

    starts: tuple[int, ...]
    ends: tuple[int, ...]
    blackout_at: bytes
    allowed: tuple[Window, ...]
    blackout: tuple[Window, ...]

    @property
    def empty(self) -> bool:
        return not self.starts

    def covers(self, minute: float) -> bool:
        index = bisect_right(self.starts, minute) - 1
        return index >= 0 and minute < self.ends[index]

    def next_start(self, minute: float) -> int:
        """The first free interval's start after ``minute``; past the week's end, next
        week's first (``WEEK_MINUTES`` added)."""
        index = bisect_right(self.starts, minute)
        return self.starts[index] if index < len(self.starts) else self.starts[0] + WEEK_MINUTES

    def blackout_covering(self, minute: float) -> Window | None:
        mark = self.blackout_at[int(minute) % WEEK_MINUTES]
        return self.blackout[mark - 1] if mark else None


@lru_cache(maxsize=1024)
def free_week(allowed: tuple[Window, ...], blackout: tuple[Window, ...]) -> FreeWeek:
    """The free week of these windows; computed once per set of windows (about a
    millisecond), looked up by every plan after."""
    dark = _week(blackout)
    inside = _week(allowed) if allowed else bytearray(b"\x01") * WEEK_MINUTES
    free = bytes(1 if a and not b else 0 for a, b in zip(inside, dark, strict=True))
    spans = [match.span() for match in re.finditer(rb"\x01+", free)]
    return FreeWeek(
        starts=tuple(start for start, _ in spans),
        ends=tuple(end for _, end in spans),
        blackout_at=bytes(dark),
        allowed=allowed,
        blackout=blackout,
    )


def windows_leave_time(allowed: tuple[Window, ...], blackout: tuple[Window, ...]) -> bool:
    """Whether some minute of the week is inside an allowed window and outside every
    blackout (wall-clock minutes; a DST change shifts no window by a whole week)."""
    return not free_week(allowed, blackout).empty


def minute_of_week(at: datetime, zone: ZoneInfo) -> float:
    """The minute of the week (Monday 00:00 = 0) the wall clock of ``zone`` reads at ``at``."""
    return _minute_of_week(at.astimezone(zone))


def _minute_of_week(local: datetime) -> float:
    return (
        local.weekday() * DAY_MINUTES
        + local.hour * 60
        + local.minute
        + (local.second + local.microsecond / 1e6) / 60
    )


def is_free(at: datetime, zone: ZoneInfo, free: FreeWeek) -> bool:
    """Whether the instant ``at`` is inside the free week (its wall clock in ``zone``)."""
    return free.covers(minute_of_week(at, zone))


def next_free(at: datetime, zone: ZoneInfo, free: FreeWeek) -> datetime | None:
    """The first instant at or after ``at`` inside the free week (``at`` itself when it
    is); None when the week has no free minute. Each step moves to the next free
    interval's start; a start a DST gap swallows whole is passed by the next step, so the
    steps are bounded by the intervals of a week and a day."""
    if free.empty:
        return None
    for _ in range(2 * len(free.starts) + 4):
        local = at.astimezone(zone)
        minute = _minute_of_week(local)
        if free.covers(minute):
            return at
        monday = datetime.combine(local.date() - timedelta(days=local.weekday()), time())
        wall = monday + timedelta(minutes=free.next_start(minute))
        at = _instant_after(wall, zone, at)
    return None


def _instant_after(wall: datetime, zone: ZoneInfo, after: datetime) -> datetime:
    """The first instant after ``after`` at which the wall clock of ``zone`` reads
    ``wall`` (or, in a gap, the gap's end): in a fold, the second of the two instants
    when the first has passed."""
    first = first_instant_at(wall, zone)
    if first > after:
        return first
    second = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
    return second if second > after else after + timedelta(minutes=1)


def first_instant_at(wall: datetime, zone: ZoneInfo) -> datetime:
    """The first instant (UTC) at which the wall clock of ``zone`` reads ``wall`` or later:
    the first of two in a fall-back fold, the gap's end for a time a spring-forward gap
    skips (as cron runs such a time)."""
    instant = wall.replace(tzinfo=zone).astimezone(UTC)
    if instant.astimezone(zone).replace(tzinfo=None) == wall:
        return instant
    # In a gap: fold=1 reads the wall with the offset after the change, an instant before
    # the gap; the change itself lies between, on a whole minute. Bisect for it.
    before = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
    low, high = 0, int((instant - before).total_seconds() // 60)
    while high - low > 1:
        middle = (low + high) // 2
        if (before + timedelta(minutes=middle)).astimezone(zone).replace(tzinfo=None) >= wall:
            high = middle
        else:
            low = middle
    return before + timedelta(minutes=high)
