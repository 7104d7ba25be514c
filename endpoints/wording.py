"""How counts and durations are said to people, one way for every message: alerts, the
admin, the commands, the API and MCP, the run lines. Pure, no models, no settings.

- Counts agree with their noun: "1 failed run", "3 failed runs" (``count_words``).
- Durations use words and at most two units, the larger first, rounded to the smaller
  one: "2 minutes", "1 hour 30 minutes", "3 days 4 hours". Below a second they stay in
  ms ("340 ms"), below ten seconds they keep a tenth ("5.6 seconds"): a response time
  is read to that precision.
- Relative times say the same durations to the second: "in 5 minutes", "3 seconds ago".
- A pause says its end and how long it lasts, or "until resumed" when only a person
  ends it.
"""

from __future__ import annotations

from datetime import datetime, timedelta

MS_PER = {"day": 86_400_000, "hour": 3_600_000, "minute": 60_000, "second": 1_000}
_UNITS = tuple(MS_PER.items())


def count_words(count: int, noun: str, plural: str = "") -> str:
    """``count`` and its noun, singular for one: '1 failed run', '0 jobs', '3 endpoints';
    ``plural`` for a noun not made plural by an s ('1 entry', '2 entries')."""
    if count == 1:
        return f"1 {noun}"
    return f"{count} {plural or noun + 's'}"


def duration_words(ms: float | None) -> str:
    """A duration as a person says it: '340 ms', '5.6 seconds', '45 seconds', '2 minutes',
    '5 minutes 36 seconds', '1 hour 30 minutes', '365 days'; '—' for none."""
    if ms is None:
        return "—"
    if ms < 0:
        return "-" + duration_words(-ms)
    if (whole_ms := int(ms + 0.5)) < MS_PER["second"]:
        return f"{whole_ms} ms"
    if (tenths := int(ms / 100 + 0.5)) < 100:
        whole, tenth = divmod(tenths, 10)
        return f"{whole}.{tenth} seconds" if tenth else count_words(whole, "second")
    # Rounded to the smaller of the two units said, then said from the largest unit in it.
    step = _UNITS[min(_largest(ms) + 1, len(_UNITS) - 1)][1]
    rounded = int(ms / step + 0.5) * step
    index = _largest(rounded)
    unit, size = _UNITS[index]
    count, rest = divmod(rounded, size)
    words = count_words(count, unit)
    if index + 1 < len(_UNITS):
        smaller, smaller_size = _UNITS[index + 1]
        if part := rest // smaller_size:
            words += " " + count_words(part, smaller)
    return words


def _largest(ms: float) -> int:
    """The index of the largest unit ``ms`` (at least a second) holds once."""
    return next(i for i, (_, size) in enumerate(_UNITS) if ms >= size)


def delta_words(delta: timedelta) -> str:
    """A time relative to now, to the second: 'in 5 minutes', '3 seconds ago', 'in 1 day
    1 hour'; within half a second of now, 'in less than a second' or 'less than a second
    ago'."""
    seconds = round(abs(delta.total_seconds()))
    said = duration_words(seconds * 1_000) if seconds else "less than a second"
    return f"in {said}" if delta >= timedelta(0) else f"{said} ago"


def pause_words(
    until: datetime, now: datetime, *, until_resumed: bool = False, brief: bool = False
) -> str:
    """How long a pause lasts: 'until 2026-03-01 14:30 UTC (for 2 hours)' (``brief``, for
    a table's cell: 'until 2026-03-01 14:30'), or 'until resumed' for one only a person
    ends (its stored end is then a formality)."""
    if until_resumed:
        return "until resumed"
    if brief:
        return f"until {until:%Y-%m-%d %H:%M}"
    left = max(until - now, timedelta(0))
    return f"until {until:%Y-%m-%d %H:%M} UTC (for {duration_words(left.total_seconds() * 1_000)})"
