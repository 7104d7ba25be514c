"""Run policies: what counts as success, retries within a slot, the backoff cap, the
breaker, the catch-up window and jitter. Pure rules, no models, no clock.

The one owner of a policy: ``policy_problems`` is the validation every interface calls
(each key and list bounded, the whole object at most ``MAX_POLICY_BYTES``), and
``stored_policy`` the typed value every reader takes, resolved once per content.

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
  it the pause lasts until a person resumes). The breaker itself: ``endpoints.breaker``.
- ``catchup_window_ms``: a scheduled run found later than this is skipped (recorded) and
  the next slot planned; empty = always run once, however late (the original's rule).
- ``jitter_ms``: a deterministic per-endpoint offset of up to this many ms on cron slots.
- ``blackout``: windows in the endpoint's time zone when it never runs, each
  ``{"start": "02:00", "end": "04:00"}`` with optional ``"days": ["sat", "sun"]`` (the day
  the window starts; one that ends before it starts runs over midnight). A run planned
  inside one moves to its end.
- ``allowed``: windows of the same shape when it may run; when given, a run planned
  outside all of them moves to the next opening (blackouts still apply inside them).
  Both planned by ``endpoints.windows``.
- ``active_from`` / ``active_until``: ISO 8601 date-times with an offset; before the first
  the first run is the schedule's first slot at or after it, after the second there is
  no next run.
- ``run_once_at``: an ISO 8601 date-time with an offset: the endpoint runs once then (its
  baseline schedule unused; retries within that slot still happen), then never again.
- ``exclude_dates``: dates and ranges (``"2026-12-24..2026-12-26"``) it never runs on,
  and ``holidays`` (``{"country": "DE", "subdivision": "BY"}``): public holidays it never
  runs on, both local dates in its zone; planned by ``endpoints.calendars``.
- ``follow_ups``: endpoints of the same tenant to run after a run of this one, each
  ``{"endpoint": "job/name", "on": "success" | "failure" | "always"}``; names and cycles
  are checked when saved (``endpoints.follow_ups``), the runs made by the engine
  (``endpoints.engine.follow_ups``).
- ``overlap``: what becomes of the slots that come due while a call is still in flight:
  ``wait`` (the default: none runs beside it; the next run is planned when it ends),
  ``skip`` (each such slot recorded ``skipped``, saying so; the next is the first slot
  after it ends) or ``{"allow": N}`` (up to N calls in flight at once, 1 to 10: a slot
  due while fewer are starts on time beside them; the lease is kept per slot, by the
  slot's run, see ``endpoints.engine.overlap_allow``). Retries within a slot need the
  endpoint's next run for themselves, so ``allow`` takes ``retry_attempts`` 1.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from datetime import UTC, datetime
from typing import Any

from endpoints.calendars import (
    Calendar,
    DayRange,
    exclude_dates_problem,
    holidays_problem,
    parse_exclude_dates,
    parse_holidays,
)
from endpoints.jsonb import json_scalar_problem, unencodable_problem
from endpoints.windows import Window, parse_window, windows_leave_time, windows_problem

MIN_DELAY_MS = 1_000
MAX_ATTEMPTS = 10
MAX_DELAY_MS = 24 * 3_600_000
MAX_JITTER_MS = 3_600_000
MAX_TEXT = 1_000
MAX_COOLDOWN_MS = 365 * 24 * 3_600_000
# The largest policy every key of which is within its own limits is about 19 KB (texts of
# MAX_TEXT four-byte characters, MAX_WINDOWS windows of both kinds on every day, fifty
# excluded ranges, ten follow-ups of the longest names).
MAX_POLICY_BYTES = 20_480
# A Retry-After is honoured up to this; further than that the slot is left to fail.
MAX_RETRY_AFTER_MS = 3_600_000

RETRYABLE = "retryable"  # a timeout, a connection error, 5xx, 429: trying again may help
NEEDS_PERSON = "needs-person"  # 401, 403, 404, 410, a failed body check: it will not
OTHER = "other"  # any other failure: not retried, counted as a failed slot
NEEDS_PERSON_CODES = frozenset({401, 403, 404, 405, 410, 451})

_STATUS_CLASS = re.compile(r"[1-5]xx\Z")
logger = logging.getLogger(__name__)


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
    exclude_dates: tuple[DayRange, ...] = ()
    holidays: tuple[str, str] = ("", "")  # (country, subdivision)
    follow_ups: tuple[FollowUp, ...] = ()
    overlap: str = "wait"  # "wait", "skip" or "allow" (``overlap: {"allow": N}``)
    # Not a key: the N of ``overlap: {"allow": N}``, the calls in flight at once (1 else).
    allow: int = 1
    # Not a key: why a stored policy could not be used (``stored_policy``), else "".
    problem: str = ""

    @property
    def checks_success(self) -> bool:
        """Whether the executor's own verdict (2xx) may be overruled."""
        return (
            self.expected_status != ("2xx",)
            or bool(self.body_contains or self.body_json_path)
            or self.max_duration_ms is not None
        )

    @property
    def calendar(self) -> Calendar | None:
        """The closed days (``endpoints.calendars``), or None when there are none."""
        if not self.exclude_dates and not self.holidays[0]:
            return None
        return Calendar(self.exclude_dates, *self.holidays)

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
KEYS = tuple(f.name for f in fields(RunPolicy) if f.name not in ("allow", "problem"))
_INT_KEYS = {
    "max_duration_ms": (1, MAX_DELAY_MS),
    "retry_attempts": (1, MAX_ATTEMPTS),
    "retry_delay_ms": (MIN_DELAY_MS, MAX_DELAY_MS),
    "retry_max_delay_ms": (MIN_DELAY_MS, MAX_DELAY_MS),
    "backoff_cap_ms": (MIN_DELAY_MS, 366 * 24 * 3_600_000),
    "breaker_failed_slots": (1, 1_000),
    "breaker_cooldown_ms": (MIN_DELAY_MS, MAX_COOLDOWN_MS),
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


MAX_FOLLOW_UPS = 10
FOLLOW_UP_ON = ("success", "failure", "always")
_FOLLOW_UP_EXAMPLE = '[{"endpoint": "reports/build", "on": "success"}]'


@dataclass(frozen=True)
class FollowUp:
    """An endpoint to run after a run: ``job/name`` in the same tenant, and when."""

    endpoint: str
    on: str = "success"

    def wanted(self, succeeded: bool) -> bool:
        return self.on == "always" or (self.on == "success") == succeeded


def follow_ups_problem(item: Any) -> str:
    """What is wrong with a stored ``follow_ups`` list, in words; "" when it is usable
    (the names and cycles are checked against the tenant when saved)."""
    if not isinstance(item, list) or len(item) > MAX_FOLLOW_UPS:
        return f"a list of at most {MAX_FOLLOW_UPS} follow-ups, e.g. {_FOLLOW_UP_EXAMPLE}."
    seen = set()
    for number, rule in enumerate(item, 1):
        if not isinstance(rule, dict) or not {"endpoint"} <= set(rule) <= {"endpoint", "on"}:
            return (
                f"follow-up {number}: give endpoint (and optionally on), e.g. {_FOLLOW_UP_EXAMPLE}."
            )
        name = rule["endpoint"]
        if not isinstance(name, str) or name.count("/") != 1 or not all(name.split("/")):
            return f'follow-up {number}: endpoint is a name job/endpoint, e.g. "reports/build".'
        if len(name) > 400 or re.search(r"[\x00-\x1f\x7f]", name):
            return f"follow-up {number}: endpoint is at most 400 characters, no control ones."
        if problem := unencodable_problem(name):
            return f"follow-up {number}: {problem}"
        if rule.get("on", "success") not in FOLLOW_UP_ON:
            return f"follow-up {number}: on is one of {', '.join(FOLLOW_UP_ON)}."
        if name in seen:
            return f"follow-up {number}: {name} is named twice; name each endpoint once."
        seen.add(name)
    return ""


class PolicyError(ValueError):
    """A policy that cannot be used; the message names the key and how to fix it."""


def policy_problems(value: Any) -> list[str]:
    """Every problem of a policy object, in words (empty when it is usable)."""
    if value is None or value == {}:
        return []
    if not isinstance(value, dict):
        return ["A run policy is a JSON object of keys such as retry_attempts; got " + _kind(value)]
    if (size := json_size(value)) > MAX_POLICY_BYTES:
        # First, so a huge object is refused before any key of it is looked at.
        return [
            f"The run policy is {size} bytes of JSON; at most {MAX_POLICY_BYTES} are allowed. "
            "Every key within its own limits fits: remove unknown keys and repeated values."
        ]
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
    if (
        not problems
        and isinstance(value.get("overlap"), dict)
        and value.get("retry_attempts", 1) > 1
    ):
        problems.append(
            'overlap: {"allow": N} starts each slot beside the calls in flight, and a retry '
            "within a slot would need the endpoint's next run, which the next slot holds "
            f"already: set retry_attempts to 1 (it is {value['retry_attempts']}), or use "
            'overlap "wait" to keep the retries.'
        )
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
        tuple(parse_window(raw) for raw in value["allowed"]),
        tuple(parse_window(raw) for raw in value.get("blackout") or []),
    ):
        problems.append(
            "allowed: every allowed window lies inside a blackout window, so no time is left "
            "to run; widen an allowed window or shorten a blackout."
        )
    return problems


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
        return windows_problem(item)
    if key in MOMENT_KEYS:
        return _moment_problem(item)
    if key == "exclude_dates":
        return exclude_dates_problem(item)
    if key == "holidays":
        return holidays_problem(item)
    if key == "follow_ups":
        return follow_ups_problem(item)
    if key == "overlap":
        return _overlap_problem(item)
    return ""


def _overlap_problem(item: Any) -> str:
    if item in OVERLAPS:
        return ""
    if isinstance(item, dict) and set(item) == {"allow"}:
        allow = item["allow"]
        if isinstance(allow, int) and not isinstance(allow, bool) and 1 <= allow <= MAX_ALLOW:
            return ""
        return (
            f"allow is how many calls of the endpoint may be in flight at once, a whole "
            f'number from 1 to {MAX_ALLOW}, e.g. {{"allow": 3}}; got {_shown(allow)}.'
        )
    return (
        'either "wait" (the default), "skip", or {"allow": N} for up to N calls in flight '
        f"at once (N from 1 to {MAX_ALLOW}); got {_shown(item)}."
    )


OVERLAPS = ("wait", "skip")
MAX_ALLOW = 10


def _shown(value: Any) -> str:
    """A value as its JSON, cut short: what the person typed, said back."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = _kind(value)
    return text if len(text) <= 40 else text[:37] + "..."


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


def resolve_policy(job_policy: Any, endpoint_policy: Any) -> RunPolicy:
    """The defaults, overridden by the job's keys, overridden by the endpoint's."""
    if not job_policy and not endpoint_policy:
        return DEFAULT
    for value in (job_policy, endpoint_policy):
        if value and not isinstance(value, dict):
            raise PolicyError(" ".join(policy_problems(value)))
    merged: dict[str, Any] = {**(job_policy or {}), **(endpoint_policy or {})}
    if problems := policy_problems(merged):
        raise PolicyError(" ".join(problems))
    if "expected_status" in merged:
        merged["expected_status"] = tuple(merged["expected_status"])
    for key in ("blackout", "allowed"):
        if key in merged:
            merged[key] = tuple(parse_window(window) for window in merged[key] or [])
    for key in MOMENT_KEYS:
        if merged.get(key) is not None:
            merged[key] = parse_moment(merged[key])
    if "exclude_dates" in merged:
        merged["exclude_dates"] = parse_exclude_dates(merged["exclude_dates"] or [])
    if "holidays" in merged:
        merged["holidays"] = parse_holidays(merged["holidays"])
    if isinstance(merged.get("overlap"), dict):
        merged["allow"] = merged["overlap"]["allow"]
        merged["overlap"] = "allow"
    if "follow_ups" in merged:
        merged["follow_ups"] = tuple(
            FollowUp(rule["endpoint"], rule.get("on", "success"))
            for rule in merged["follow_ups"] or []
        )
    return replace(DEFAULT, **merged)


def json_size(value: Any) -> int:
    """Bytes of ``value`` as compact UTF-8 JSON (a lone surrogate counted, not refused)."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    return len(text.encode(errors="surrogatepass"))


def stored_policy(
    job_policy: Any, endpoint_policy: Any, *, version: str | None = None
) -> RunPolicy:
    """The run policy an endpoint runs by, from its job's and its own stored objects: the
    one way every reader (engine, governor, preview, alerts) gets it. Resolved once per
    version in a process — ``version`` where the reader has one (the engine reads a
    digest from the database with the endpoint), else the content itself — so a batch of
    runs, a preview of a hundred plans or a job's endpoints pay one parse. Stored data
    that does not validate (edited in the database, or saved before a limit existed)
    runs by the defaults, with ``problem`` saying why, which ``explain`` shows: one rule
    everywhere, and the endpoint keeps running rather than stopping on it."""
    if not job_policy and not endpoint_policy:
        return DEFAULT
    if version is None:
        both = [{} if policy is None else policy for policy in (job_policy, endpoint_policy)]
        version = json.dumps(both, sort_keys=True, default=str)
        if len(version) > 2 * MAX_POLICY_BYTES:  # never parsed, nor kept as a key
            return replace(DEFAULT, problem=f"it is over {MAX_POLICY_BYTES} bytes of JSON")
    return policy_of_version(version, lambda: (job_policy, endpoint_policy))


def resolved_policy(version: str) -> RunPolicy | None:
    """The policy of ``version`` if this process has resolved it, else None."""
    return _RESOLVED.get(version)


def policy_of_version(version: str, stored: Callable[[], tuple[Any, Any]]) -> RunPolicy:
    """The policy of ``version``, resolved from ``stored()`` (the job's and the
    endpoint's objects) the first time this process meets that version."""
    policy = _RESOLVED.get(version)
    if policy is None:
        policy = _resolve_stored(*stored())
        if len(_RESOLVED) >= MAX_RESOLVED:
            _RESOLVED.clear()
        _RESOLVED[version] = policy
    return policy


# Resolved policies by version. A dict, not functools.lru_cache: the key (a version) is
# not the arguments (two dicts, which cannot be hashed). Emptied when full: a process
# meets far fewer distinct policies than this between two edits.
_RESOLVED: dict[str, RunPolicy] = {}
MAX_RESOLVED = 4096


def _resolve_stored(job_policy: Any, endpoint_policy: Any) -> RunPolicy:
    try:
        return resolve_policy(job_policy, endpoint_policy)
    except PolicyError as error:
        logger.warning("stored run policy cannot be used, the defaults apply: %s", error)
        return replace(DEFAULT, problem=str(error))


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
