"""Run policies: what counts as success, retries within a slot, the backoff cap, the
breaker, the catch-up window and jitter. Pure rules, no models, no clock.

A policy is a small JSON object on the job (the defaults of its endpoints) and on the
endpoint (an override, key by key). Both empty, the common case, resolve to ``DEFAULT``
without parsing anything: the hot path pays nothing for the feature it does not use.

Keys (all optional; ``DEFAULTS`` below, with the README saying why):

- ``expected_status``: a list of codes (``200``) or classes (``"2xx"``); default ``["2xx"]``.
- ``body_contains``: text the response body must contain.
- ``body_json_path`` + ``body_json_equals``: a dotted path into the JSON body
  (``status``, ``data.items.0.state``) and the value it must equal.
- ``max_duration_ms``: a slower answer fails.
- ``retry_attempts``: attempts per slot, the first included (1 = no retry).
- ``retry_delay_ms``, ``retry_backoff`` (``fixed`` | ``exponential``), ``retry_max_delay_ms``.
- ``backoff_cap_ms``: failures back the baseline interval off up to this (never below the
  interval itself), so a daily endpoint with one bad answer is not put off for two days.
- ``breaker_failed_slots``: pause the endpoint after this many failed slots in a row.
- ``breaker_needs_person``: pause at once on a failure a person must fix (401, 403, 404,
  410, a failed body check).
- ``breaker_cooldown_ms``: the breaker's pause length; its end is the probe run (without
  it the pause lasts until a person resumes, at most ``BREAKER_HOLD_MS``).
- ``catchup_window_ms``: a scheduled run found later than this is skipped (recorded) and
  the next slot planned; empty = always run once, however late (the original's rule).
- ``jitter_ms``: a deterministic per-endpoint offset of up to this many ms on cron slots.
- ``blackout``: windows in the endpoint's time zone when it never runs, each
  ``{"start": "02:00", "end": "04:00"}`` with optional ``"days": ["sat", "sun"]`` (the day
  the window starts; one that ends before it starts runs over midnight). A run planned
  inside one moves to its end.
- ``allowed``: windows of the same shape when it may run; when given, a run planned
  outside all of them moves to the next opening (blackouts still apply inside them).
- ``active_from`` / ``active_until``: ISO 8601 date-times with an offset; before the first
  the first run is the schedule's first slot at or after it, after the second there is
  no next run.
- ``run_once_at``: an ISO 8601 date-time with an offset: the endpoint runs once then (its
  baseline schedule unused; retries within that slot still happen), then never again.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, fields, replace
from datetime import UTC, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from endpoints.jsonb import json_scalar_problem, unencodable_problem
from endpoints.wording import duration_words

MIN_DELAY_MS = 1_000
MAX_ATTEMPTS = 10
MAX_DELAY_MS = 24 * 3_600_000
MAX_JITTER_MS = 3_600_000
MAX_TEXT = 1_000
BREAKER_HOLD_MS = 365 * 24 * 3_600_000
# How the breaker's pause reason starts: the alerts tell a breaker's pause by it.
BREAKER_REASON_PREFIX = "Breaker: "
# How the reason of a breaker's pause without a cool-down ends: that pause lasts until a
# person resumes it (its stored end, BREAKER_HOLD_MS ahead, only gives the plan a time).
BREAKER_UNTIL_RESUMED = "; resume it once the cause is fixed"
# A Retry-After is honoured up to this; further than that the slot is left to fail.
MAX_RETRY_AFTER_MS = 3_600_000

RETRYABLE = "retryable"  # a timeout, a connection error, 5xx, 429: trying again may help
NEEDS_PERSON = "needs-person"  # 401, 403, 404, 410, a failed body check: it will not
OTHER = "other"  # any other failure: not retried, counted as a failed slot
NEEDS_PERSON_CODES = frozenset({401, 403, 404, 405, 410, 451})

_STATUS_CLASS = re.compile(r"[1-5]xx\Z")


DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
MAX_WINDOWS = 20
_CLOCK = re.compile(r"([01]\d|2[0-3]):([0-5]\d)\Z")


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


@dataclass(frozen=True)
class RunPolicy:
    expected_status: tuple[int | str, ...] = ("2xx",)
    body_contains: str = ""
    body_json_path: str = ""
    body_json_equals: Any = None
    max_duration_ms: int | None = None
    retry_attempts: int = 1
    retry_delay_ms: int = 10_000
    retry_backoff: str = "exponential"
    retry_max_delay_ms: int = 300_000
    backoff_cap_ms: int | None = 3_600_000
    breaker_failed_slots: int | None = None
    breaker_needs_person: bool = False
    breaker_cooldown_ms: int | None = None
    catchup_window_ms: int | None = None
    jitter_ms: int = 0
    blackout: tuple[Window, ...] = ()
    allowed: tuple[Window, ...] = ()
    active_from: datetime | None = None
    active_until: datetime | None = None
    run_once_at: datetime | None = None

    @property
    def checks_success(self) -> bool:
        """Whether the executor's own verdict (2xx) may be overruled."""
        return (
            self.expected_status != ("2xx",)
            or bool(self.body_contains or self.body_json_path)
            or self.max_duration_ms is not None
        )

    def retry_delay(self, attempt: int, retry_after_ms: int | None) -> int:
        """The wait in ms before attempt ``attempt + 1``, after attempt ``attempt`` failed."""
        delay = self.retry_delay_ms
        if self.retry_backoff == "exponential":
            delay = self.retry_delay_ms * 2 ** max(attempt - 1, 0)
        delay = min(delay, self.retry_max_delay_ms)
        if retry_after_ms is not None:
            delay = max(delay, min(retry_after_ms, MAX_RETRY_AFTER_MS))
        return delay


DEFAULT = RunPolicy()
KEYS = tuple(f.name for f in fields(RunPolicy))
_INT_KEYS = {
    "max_duration_ms": (1, MAX_DELAY_MS),
    "retry_attempts": (1, MAX_ATTEMPTS),
    "retry_delay_ms": (MIN_DELAY_MS, MAX_DELAY_MS),
    "retry_max_delay_ms": (MIN_DELAY_MS, MAX_DELAY_MS),
    "backoff_cap_ms": (MIN_DELAY_MS, 366 * 24 * 3_600_000),
    "breaker_failed_slots": (1, 1_000),
    "breaker_cooldown_ms": (MIN_DELAY_MS, BREAKER_HOLD_MS),
    "catchup_window_ms": (0, 366 * 24 * 3_600_000),
    "jitter_ms": (0, MAX_JITTER_MS),
}
_NULLABLE = {
    "max_duration_ms",
    "backoff_cap_ms",
    "breaker_failed_slots",
    "breaker_cooldown_ms",
    "catchup_window_ms",
}


def breaker_pause(reason: str, cooldown_ms: int | None) -> tuple[int, str]:
    """How long the breaker pauses (ms) and the pause's reason: why it opened, then how
    it ends (a probe after the cool-down, or a person), within ``MAX_TEXT`` so the end
    is never cut off."""
    if cooldown_ms is None:
        hold, ending = BREAKER_HOLD_MS, BREAKER_UNTIL_RESUMED
    else:
        hold, ending = cooldown_ms, f"; a probe run after {duration_words(cooldown_ms)}"
    return hold, reason[: MAX_TEXT - len(ending)] + ending


def lasts_until_resumed(pause_reason: str) -> bool:
    """Whether a pause with this reason is the breaker's without a cool-down, which only
    a person ends: said "until resumed" wherever a pause is shown, not as its stored end."""
    return pause_reason.startswith(BREAKER_REASON_PREFIX) and pause_reason.endswith(
        BREAKER_UNTIL_RESUMED
    )


class PolicyError(ValueError):
    """A policy that cannot be used; the message names the key and how to fix it."""


def policy_problems(value: Any) -> list[str]:
    """Every problem of a policy object, in words (empty when it is usable)."""
    if value is None or value == {}:
        return []
    if not isinstance(value, dict):
        return ["A run policy is a JSON object of keys such as retry_attempts; got " + _kind(value)]
    problems = []
    for key, item in value.items():
        if key not in KEYS:
            problems.append(f"{key!s:.60}: not a policy key; use one of {', '.join(KEYS)}.")
            continue
        if problem := _key_problem(key, item):
            problems.append(f"{key}: {problem}")
    if (
        not problems
        and value.get("body_json_equals") is not None
        and not value.get("body_json_path")
    ):
        problems.append("body_json_equals: give body_json_path too (where to find the value).")
    if not problems:
        problems += _window_problems(value)
    return problems


def _window_problems(value: dict[str, Any]) -> list[str]:
    """Rules across the window keys, once each key is usable on its own."""
    problems = []
    start, end, once = (
        parse_moment(value[key]) if value.get(key) else None
        for key in ("active_from", "active_until", "run_once_at")
    )
    if start and end and end <= start:
        problems.append(
            f"active_until: {value['active_until']} is not after active_from "
            f"{value['active_from']}; give an end after the start."
        )
    if once and end and once > end:
        problems.append(
            f"run_once_at: {value['run_once_at']} is after active_until {value['active_until']}, "
            "so the one-off would never run; move one of them."
        )
    if value.get("allowed") and not windows_leave_time(
        [_window(raw) for raw in value["allowed"]],
        [_window(raw) for raw in value.get("blackout") or []],
    ):
        problems.append(
            "allowed: every allowed window lies inside a blackout window, so no time is left "
            "to run; widen an allowed window or shorten a blackout."
        )
    return problems


WEEK_MINUTES = 7 * 24 * 60


def _week(windows: list[Window]) -> bytearray:
    """The minutes of a week (Monday 00:00 = 0) that ``windows`` cover, one byte each."""
    covered = bytearray(WEEK_MINUTES)
    for window in windows:
        length = (window.end - window.start) % (24 * 60)
        for day in window.days or range(7):
            first = day * 24 * 60 + window.start
            for begin, stop in (
                (first, first + length),
                (first - WEEK_MINUTES, first + length - WEEK_MINUTES),
            ):
                low, high = max(begin, 0), min(stop, WEEK_MINUTES)
                if low < high:
                    covered[low:high] = b"\x01" * (high - low)
    return covered


def windows_leave_time(allowed: list[Window], blackout: list[Window]) -> bool:
    """Whether some minute of the week is inside an allowed window and outside every
    blackout (wall-clock minutes; a DST change shifts no window by a whole week)."""
    inside, dark = _week(allowed), _week(blackout)
    return any(a and not b for a, b in zip(inside, dark, strict=True))


def _key_problem(key: str, item: Any) -> str:
    if key in _INT_KEYS:
        if item is None and key in _NULLABLE:
            return ""
        low, high = _INT_KEYS[key]
        if not isinstance(item, int) or isinstance(item, bool):
            return (
                f"a whole number of {'attempts' if key.endswith('attempts') else 'ms'} "
                + ("(or null), " if key in _NULLABLE else "")
                + f"got {_kind(item)}."
            )
        if not low <= item <= high:
            return f"must be between {low} and {high}; got {item}."
        return ""
    if key == "expected_status":
        if not isinstance(item, list) or not item or len(item) > 50:
            return 'a list of 1 to 50 codes or classes, e.g. [200, 204] or ["2xx"].'
        for code in item:
            if isinstance(code, bool) or not (
                (isinstance(code, int) and 100 <= code <= 599)
                or (isinstance(code, str) and _STATUS_CLASS.match(code))
            ):
                return f'{code!r:.40} is neither a code 100-599 nor a class like "2xx".'
        return ""
    if key in ("body_contains", "body_json_path"):
        if not isinstance(item, str) or len(item) > MAX_TEXT:
            return f"text of at most {MAX_TEXT} characters."
        if re.search(r"[\x00-\x1f\x7f]", item):
            return "control characters are not allowed."
        return unencodable_problem(item)
    if key == "body_json_equals":
        # The policy is stored as jsonb, which refuses NaN, Infinity, NUL and lone surrogates.
        if isinstance(item, dict | list):
            return "a JSON scalar (text, number, true, false or null)."
        if problem := json_scalar_problem(item):
            return f"the value {problem}."
        if len(json.dumps(item)) > MAX_TEXT:
            return f"a JSON scalar of at most {MAX_TEXT} characters."
        return ""
    if key == "retry_backoff":
        return "" if item in ("fixed", "exponential") else 'either "fixed" or "exponential".'
    if key == "breaker_needs_person":
        return "" if isinstance(item, bool) else "true or false."
    if key in ("blackout", "allowed"):
        return _windows_problem(item)
    if key in MOMENT_KEYS:
        return _moment_problem(item)
    return ""


MOMENT_KEYS = ("active_from", "active_until", "run_once_at")
_MOMENT_EXAMPLE = '"2026-12-01T09:00:00+01:00" or "2026-12-01T08:00:00Z"'


def _moment_problem(item: Any) -> str:
    if item is None:
        return ""
    if not isinstance(item, str) or len(item) > 40:
        return f"an ISO 8601 date-time with an offset, e.g. {_MOMENT_EXAMPLE}; got {_kind(item)}."
    try:
        moment = datetime.fromisoformat(item)
    except ValueError:
        return f"{item!r} is not an ISO 8601 date-time; write it like {_MOMENT_EXAMPLE}."
    if moment.tzinfo is None or moment.utcoffset() is None:
        return f'{item!r} has no offset, so its instant is unknown; add one, e.g. "+01:00" or "Z".'
    try:
        year = moment.astimezone(UTC).year
    except OverflowError:  # 0001-01-01T00:00+01:00 is in the year 0 in UTC
        year = moment.year
    if not 2000 <= year <= 9000:
        return f"{item!r} is not between the years 2000 and 9000."
    return ""


def past_one_off(value: Any, stored: Any, now: datetime) -> str:
    """Why a one-off time being set is refused: it has passed. One already saved (it may
    have run) is left alone, so it never makes an unrelated edit fail."""
    text = value.get("run_once_at") if isinstance(value, dict) else None
    if not text or parse_moment(text) > now:
        return ""
    old = stored.get("run_once_at") if isinstance(stored, dict) else None
    if old == text or (
        isinstance(old, str)
        and not _moment_problem(old)
        and parse_moment(old) == parse_moment(text)
    ):
        return ""
    return f"run_once_at: {text} is in the past; give a future time, or use Run now."


def parse_moment(text: str) -> datetime:
    """A validated ISO date-time with an offset, as an aware UTC datetime."""
    return datetime.fromisoformat(text).astimezone(UTC)


def _windows_problem(item: Any) -> str:
    example = '[{"start": "02:00", "end": "04:00", "days": ["sat", "sun"]}]'
    if not isinstance(item, list) or len(item) > MAX_WINDOWS:
        return f"a list of at most {MAX_WINDOWS} windows, e.g. {example}."
    for number, window in enumerate(item, 1):
        if not isinstance(window, dict) or not {"start", "end"} <= set(window) <= {
            "start",
            "end",
            "days",
        }:
            return f"window {number}: give start and end (and optionally days), e.g. {example}."
        for edge in ("start", "end"):
            if not isinstance(window[edge], str) or not _CLOCK.match(window[edge]):
                return f"window {number}: {edge} is a time of day as HH:MM (00:00-23:59)."
        if window["start"] == window["end"]:
            return f"window {number}: start and end are the same; give a window of some length."
        days = window.get("days", [])
        if not isinstance(days, list) or not all(day in DAYS for day in days):
            return f"window {number}: days is a list of {', '.join(DAYS)}."
    return ""


def _window(raw: dict[str, Any]) -> Window:
    def minutes(text: str) -> int:
        hours, mins = text.split(":")
        return int(hours) * 60 + int(mins)

    days = frozenset(DAYS.index(day) for day in raw.get("days", []))
    return Window(minutes(raw["start"]), minutes(raw["end"]), days)


def blackout_end(
    at: datetime, zone: ZoneInfo, windows: tuple[Window, ...]
) -> tuple[datetime, Window] | None:
    """If ``at`` falls inside one of ``windows`` (local time in ``zone``), that window's
    end as an aware UTC time after ``at``, and the window; else None."""
    local = at.astimezone(zone)
    minute = local.hour * 60 + local.minute + (local.second + local.microsecond / 1e6) / 60
    for window in windows:
        # The window that started today, and one that started yesterday over midnight.
        for back in (0, 1):
            day = local.date() - timedelta(days=back)
            if window.days and day.weekday() not in window.days:
                continue
            length = (window.end - window.start) % (24 * 60)
            since = minute + back * 24 * 60 - window.start
            if 0 <= since < length:
                start_local = datetime.combine(day, time(), tzinfo=zone) + timedelta(
                    minutes=window.start
                )
                naive_end = start_local.replace(tzinfo=None) + timedelta(minutes=length)
                end = first_instant_at(naive_end, zone)
                if end <= at:  # cannot happen with whole-minute zones; never move back
                    end = at + timedelta(minutes=1)
                return end, window
    return None


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


# How far ahead an opening of the allowed windows is looked for: each recurs weekly, so a
# week and a day (a window whose one day falls in a DST gap) always holds one if any.
OPENING_DAYS = 8


def allowed_opening(
    at: datetime, zone: ZoneInfo, windows: tuple[Window, ...]
) -> tuple[datetime, Window | None] | None:
    """``(at, None)`` when ``at`` is inside one of ``windows``; else the first instant after
    it inside one, and that window; None when none opens within ``OPENING_DAYS``."""
    if blackout_end(at, zone, windows) is not None:
        return at, None
    today = at.astimezone(zone).date()
    best: tuple[datetime, Window] | None = None
    for ahead in range(OPENING_DAYS + 1):
        day = today + timedelta(days=ahead)
        if best is not None and datetime.combine(day, time(), tzinfo=zone) > best[0]:
            break
        for window in windows:
            if window.days and day.weekday() not in window.days:
                continue
            wall = datetime.combine(day, time()) + timedelta(minutes=window.start)
            opening = first_instant_at(wall, zone)
            # A start the gap swallows whole (02:00-02:30 on the spring-forward night)
            # opens nothing that day.
            if opening <= at or blackout_end(opening, zone, (window,)) is None:
                continue
            if best is None or opening < best[0]:
                best = (opening, window)
    return best


def parse_policy(value: Any) -> RunPolicy:
    """The policy of one object (job or endpoint) over the defaults; PolicyError if bad."""
    return resolve_policy(None, value)


def resolve_policy(job_policy: Any, endpoint_policy: Any) -> RunPolicy:
    """The defaults, overridden by the job's keys, overridden by the endpoint's."""
    if not job_policy and not endpoint_policy:
        return DEFAULT
    merged: dict[str, Any] = {**(job_policy or {}), **(endpoint_policy or {})}
    if problems := policy_problems(merged):
        raise PolicyError(" ".join(problems))
    if "expected_status" in merged:
        merged["expected_status"] = tuple(merged["expected_status"])
    for key in ("blackout", "allowed"):
        if key in merged:
            merged[key] = tuple(_window(window) for window in merged[key] or [])
    for key in MOMENT_KEYS:
        if merged.get(key) is not None:
            merged[key] = parse_moment(merged[key])
    return replace(DEFAULT, **merged)


@dataclass(frozen=True)
class Verdict:
    success: bool
    reason: str = ""  # which criterion failed, in words
    kind: str = ""  # RETRYABLE, NEEDS_PERSON or OTHER for a failure


def judge(
    policy: RunPolicy,
    *,
    status: str,
    status_code: int | None,
    body: Any,
    duration_ms: int,
    error: str,
) -> Verdict:
    """Whether a finished request meets the policy's success criteria, and if not, why
    and whether trying again may help. ``status`` is the executor's (``success`` for a
    2xx, ``failure``, ``timeout``)."""
    if status == "timeout":
        return Verdict(False, error, RETRYABLE)
    if status_code is None:  # no answer: connection refused, reset, DNS, the SSRF guard
        return Verdict(False, error, RETRYABLE)
    if not status_matches(policy.expected_status, status_code):
        words = ", ".join(str(code) for code in policy.expected_status)
        return Verdict(
            False, f"HTTP {status_code} is not an expected status ({words})", _kind_of(status_code)
        )
    if policy.max_duration_ms is not None and duration_ms > policy.max_duration_ms:
        return Verdict(
            False,
            f"took {duration_ms} ms, more than the maximum duration of {policy.max_duration_ms} ms",
            RETRYABLE,
        )
    if policy.body_contains and policy.body_contains not in _text(body):
        return Verdict(
            False, f"the body does not contain {policy.body_contains!r:.80}", NEEDS_PERSON
        )
    if policy.body_json_path:
        found, value = json_path(body, policy.body_json_path)
        if not found:
            return Verdict(False, f"the body has no {policy.body_json_path}", NEEDS_PERSON)
        if value != policy.body_json_equals:
            return Verdict(
                False,
                f"{policy.body_json_path} is {json.dumps(value)[:80]}, "
                f"expected {json.dumps(policy.body_json_equals)[:80]}",
                NEEDS_PERSON,
            )
    return Verdict(True)


def classify(status: str, status_code: int | None) -> str:
    """The kind of a failure the executor reported, without a policy to judge it."""
    if status == "timeout" or status_code is None:
        return RETRYABLE
    return _kind_of(status_code)


def _kind_of(status_code: int) -> str:
    if status_code == 429 or 500 <= status_code <= 599:
        return RETRYABLE
    if status_code in NEEDS_PERSON_CODES:
        return NEEDS_PERSON
    return OTHER


def status_matches(expected: tuple[int | str, ...], code: int) -> bool:
    return any(
        code == item if isinstance(item, int) else str(code)[0] == item[0] for item in expected
    )


def json_path(body: Any, path: str) -> tuple[bool, Any]:
    """``(found, value)`` at a dotted path; list items by their index."""
    current = body
    for part in path.split("."):
        if isinstance(current, dict) and part in current:
            current = current[part]
        elif isinstance(current, list) and _ascii_digits(part) and int(part) < len(current):
            current = current[int(part)]
        else:
            return False, None
    return True, current


def _ascii_digits(text: str) -> bool:
    # Not str.isdigit alone: "²" is a digit to it, not to int.
    return text.isascii() and text.isdigit()


def retry_after_ms(headers: dict[str, str] | None) -> int | None:
    """A ``Retry-After`` in seconds, as ms (an HTTP date is not honoured: no clock here)."""
    value = (headers or {}).get("retry-after", "").strip()
    return int(value) * 1000 if _ascii_digits(value) and len(value) <= 9 else None  # delay-seconds


def jitter_offset_ms(endpoint_id: int, jitter_ms: int) -> int:
    """A fixed offset in [0, jitter_ms] per endpoint: Knuth's multiplicative hash spreads
    consecutive ids evenly, and the same endpoint always gets the same offset."""
    if jitter_ms <= 0:
        return 0
    return ((endpoint_id * 2_654_435_761) % 2**32) * (jitter_ms + 1) // 2**32


def _text(body: Any) -> str:
    if body is None:
        return ""
    return body if isinstance(body, str) else json.dumps(body, ensure_ascii=False)


def _kind(value: Any) -> str:
    return type(value).__name__ if value is not None else "null"
