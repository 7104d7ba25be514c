"""Schedules people can write: intervals like ``90s`` or ``1h30m``, cron in any time zone.

Cron is evaluated by cronsim, which follows classic cron (cronie) semantics across daylight
saving time: a wall-clock time skipped by the spring-forward gap fires once at the first
valid instant after it, a wall-clock time repeated by the fall-back fold fires once (at
its first occurrence), and wildcard or stepped hour fields follow real elapsed time.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from cron_descriptor import Options, get_description
from cronsim import CronSim, CronSimError

from endpoints.wording import count_words

SHORTHANDS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

UNIT_MS = {"d": 86_400_000, "h": 3_600_000, "m": 60_000, "s": 1_000, "ms": 1}
_PART = re.compile(r"(\d+)([a-zA-Z]*)")

# The longest duration anything is planned with: every interval, bound, hint TTL and
# pause the validation path accepts is at most this (a year is plenty for a scheduler).
# A stored value beyond it (written before the bound existed, or by raw SQL) is planned
# as this and reported in the decision's steps: never an OverflowError, never a wedged
# endpoint.
MAX_PLANNABLE_MS = 365 * 24 * 60 * 60 * 1000


class ScheduleError(ValueError):
    """A schedule a person wrote that cannot be used; the message says how to fix it."""


def parse_interval(text: str | int) -> int:
    """Return milliseconds for ``90s``, ``5m``, ``1h30m``, ``1d`` or plain milliseconds."""
    if isinstance(text, bool):
        raise ScheduleError(f"{text!r} is not an interval; write e.g. 90s, 5m, 1h30m or 1d.")
    if isinstance(text, int):
        return text
    raw = str(text).strip()
    if not raw:
        raise ScheduleError("The interval is empty; write e.g. 90s, 5m, 1h30m or 1d.")
    if raw.isascii() and raw.isdigit():  # "²" is a digit to isdigit, not to int
        return int(raw)
    total, pos = 0, 0
    compact = raw.replace(" ", "")
    for match in _PART.finditer(compact):
        if match.start() != pos:
            break
        number, unit = match.groups()
        if not unit and match.end() == len(compact):
            raise ScheduleError(
                f"{raw!r}: {number} has no unit; use s, m, h or d (or plain milliseconds)."
            )
        if not unit:  # e.g. the "1" of "1.5h": fall through to the general message
            break
        if unit.lower() not in UNIT_MS:
            raise ScheduleError(f"{raw!r}: unknown unit {unit!r}; use s, m, h or d.")
        total += int(number) * UNIT_MS[unit.lower()]
        pos = match.end()
    if pos != len(compact):
        raise ScheduleError(
            f"{raw!r} is not an interval; write a number and a unit, e.g. 90s, 5m, 1h30m or 1d."
        )
    return total


def format_interval(ms: int) -> str:
    """The shortest ``1h30m``-style spelling of ``ms`` (inverse of ``parse_interval``)."""
    if ms <= 0:
        return "0s"
    parts = []
    for unit in ("d", "h", "m", "s", "ms"):
        count, ms = divmod(ms, UNIT_MS[unit])
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)


def validate_timezone(name: str) -> ZoneInfo:
    # "localtime" is in the system's list but means the server's own clock: refused.
    if not name or name == "localtime" or name not in _zone_names():
        raise ScheduleError(
            f"{name!r} is not an IANA time zone; use a name like UTC, Europe/Berlin or "
            "America/New_York."
        )
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ScheduleError(f"{name!r} is not an IANA time zone.") from None


_ZONES: frozenset[str] | None = None


def _zone_names() -> frozenset[str]:
    global _ZONES
    if _ZONES is None:
        _ZONES = frozenset(available_timezones()) | {"UTC"}
    return _ZONES


def normalize_cron(expr: str) -> str:
    """Expand @shorthands and validate a 5-field expression; return it in 5-field form."""
    text = " ".join(str(expr).split())
    if text.lower() in SHORTHANDS:
        return SHORTHANDS[text.lower()]
    if text.startswith("@"):
        raise ScheduleError(
            f"{expr!r}: unknown shorthand; use one of {', '.join(sorted(SHORTHANDS))}."
        )
    fields = text.split(" ")
    if len(fields) != 5:
        raise ScheduleError(
            f"{expr!r} has {len(fields)} fields; cron needs 5: minute hour day-of-month "
            "month day-of-week (e.g. '*/5 * * * *'), or a shorthand such as @hourly."
        )
    try:
        # cronsim also rejects expressions that can never fire (e.g. 0 0 30 2 *).
        CronSim(text, datetime(2000, 1, 1, tzinfo=ZoneInfo("UTC")))
    except CronSimError as exc:
        raise ScheduleError(f"{expr!r} is not a valid cron expression: {exc}.") from None
    return text


def next_cron_after(expr: str, tz_name: str, now: datetime) -> datetime:
    """The first occurrence of ``expr`` in ``tz_name`` strictly after ``now``, in UTC."""
    zone = ZoneInfo(tz_name)
    utc = ZoneInfo("UTC")
    # cronsim ignores ``fold``: from inside the repeated hour of a fall-back fold it can
    # yield the hour's first pass, which is already in the past. Skip such occurrences;
    # that also keeps a fixed wall time in the fold to one run (its first occurrence).
    for occurrence in CronSim(normalize_cron(expr), now.astimezone(zone)):
        if occurrence.astimezone(utc) > now:
            return occurrence.astimezone(utc)
    raise AssertionError("unreachable: a validated cron expression always fires again")


def last_cron_at_or_before(expr: str, tz_name: str, at: datetime) -> datetime:
    """The last occurrence of ``expr`` in ``tz_name`` at or before ``at``, in UTC (the
    slot that was due at ``at``)."""
    zone, utc = ZoneInfo(tz_name), ZoneInfo("UTC")
    # cronsim's reverse walk starts strictly before its start, to the second.
    for occurrence in CronSim(
        normalize_cron(expr), (at + timedelta(seconds=1)).astimezone(zone), reverse=True
    ):
        if occurrence.astimezone(utc) <= at:
            return occurrence.astimezone(utc)
    raise AssertionError("unreachable: a validated cron expression has fired before")


CRON_GAP_SAMPLE = 1_000  # occurrences
CRON_GAP_WINDOW = timedelta(days=366)


def shortest_cron_gap_ms(expr: str, tz_name: str) -> int:
    """The shortest time between two runs of ``expr`` in ``tz_name``, in ms, over a
    sample of its runs (the first ``CRON_GAP_SAMPLE`` within a year of a fixed start,
    so a pattern that crowds together on some days only is seen too). Cron never fires
    more often than once a minute, so no cron is shorter than 60 s."""
    zone, utc = ZoneInfo(tz_name), ZoneInfo("UTC")
    start = datetime(2026, 1, 1, tzinfo=zone)
    shortest = int(CRON_GAP_WINDOW.total_seconds() * 1000)
    previous = None
    for count, occurrence in enumerate(CronSim(normalize_cron(expr), start)):
        at = occurrence.astimezone(utc)
        if at - start > CRON_GAP_WINDOW or count >= CRON_GAP_SAMPLE:
            break
        if previous is not None and at > previous:
            shortest = min(shortest, int((at - previous).total_seconds() * 1000))
        previous = at
    return shortest


def describe_cron(expr: str, tz_name: str = "UTC") -> str:
    options = Options()
    options.use_24hour_time_format = True
    options.verbose = False
    text = get_description(normalize_cron(expr), options)
    text = text[0].lower() + text[1:] if text else text
    # cron-descriptor writes "At 00:00, only on Sunday"; people write "at 00:00 on Sunday".
    for wordy, plain in _CRON_PHRASES:
        text = text.replace(wordy, plain)
    # "at 09:00, Monday through Friday" -> "at 09:00 on Monday through Friday".
    text = re.sub(r"^(at [^,]*), (?=[A-Z])", r"\1 on ", text)
    return f"{text} ({tz_name})"


_CRON_PHRASES = ((", only on ", " on "), (", only in ", " in "), (", on ", " on "))


def describe_interval(ms: int) -> str:
    if ms % UNIT_MS["d"] == 0:
        count, unit = ms // UNIT_MS["d"], "day"
    elif ms % UNIT_MS["h"] == 0:
        count, unit = ms // UNIT_MS["h"], "hour"
    elif ms % UNIT_MS["m"] == 0:
        count, unit = ms // UNIT_MS["m"], "minute"
    elif ms % UNIT_MS["s"] == 0:
        count, unit = ms // UNIT_MS["s"], "second"
    else:
        return f"every {format_interval(ms)}"
    return f"every {unit}" if count == 1 else f"every {count_words(count, unit)}"


def describe_schedule(
    *, baseline_cron: str = "", timezone: str = "UTC", baseline_interval_ms: int | None = None
) -> str:
    """A person's reading of a schedule: 'every 5 minutes', 'at 09:00 on Monday ... (UTC)'."""
    if baseline_cron:
        return describe_cron(baseline_cron, timezone or "UTC")
    if baseline_interval_ms:
        return describe_interval(baseline_interval_ms)
    return "no schedule"
