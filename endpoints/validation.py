"""The one validation path for endpoints, jobs and tenants, whatever the interface.

Every interface (admin form, import, API, MCP) validates through the model's
``full_clean`` (the admin, the API and MCP through ``endpoints.forms``), which runs

1. ``check_endpoint_values`` (from ``Endpoint.clean_fields``): the shape and type of every
   value a person or a file may give, before Django converts or compares anything, so
   ``timeout_ms="abc"``, ``float("inf")`` or a 10 000-deep body is a message, never a
   TypeError or RecursionError; control characters where they make no sense; header
   names as RFC 9110 tokens; the size caps below;
2. Django's own field checks, then ``Endpoint.clean`` (ranges, the schedule, the
   tenant's floor, names), which compare only values that passed step 1.

The rules are functions of the values here, so this module imports no model: the models
call it (``Endpoint.clean_fields`` and ``clean``), never the other way round.

Problems are raised as one ``ValidationError`` keyed by field, worded for a person: they
say what is wrong and how to fix it, and never repeat a header's value (it may be a
secret).

Caps (settings, documented in README "Settings"): ``CRONICORN_MAX_HEADERS``,
``CRONICORN_MAX_HEADER_VALUE_CHARS``, ``CRONICORN_MAX_BODY_BYTES``,
``CRONICORN_MAX_DESCRIPTION_CHARS``, ``CRONICORN_MAX_JSON_DEPTH``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

import httpx
from django.conf import settings
from django.core.exceptions import ValidationError

from endpoints.jsonb import json_scalar_problem, unencodable_problem
from endpoints.policies import PolicyError, past_one_off, policy_problems, resolve_policy
from endpoints.schedules import (
    MAX_PLANNABLE_MS,
    ScheduleError,
    format_interval,
    normalize_cron,
    shortest_cron_gap_ms,
    validate_timezone,
)

# RFC 9110 5.1 / 5.6.2: a field name is a token.
HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+\Z")
# RFC 9110 5.5: a field value never holds CR, LF or NUL; other controls but HTAB neither.
HEADER_VALUE_FORBIDDEN = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
# One-line text (names, URLs, cron, time zones): no control characters at all.
LINE_FORBIDDEN = re.compile(r"[\x00-\x1f\x7f]")
# Multi-line text (descriptions): tabs and line breaks are fine, other controls are not.
TEXT_FORBIDDEN = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
WHOLE_NUMBER_FIELDS = (
    "timeout_ms",
    "max_response_size_kb",
    "baseline_interval_ms",
    "min_interval_ms",
    "max_interval_ms",
)
# The longest any stored or computed duration may be: what the governor can plan.
MAX_DURATION_MS = MAX_PLANNABLE_MS
# Upper bounds of the whole-number fields that have none in the model's own checks.
DURATION_FIELDS = ("baseline_interval_ms", "min_interval_ms", "max_interval_ms")
LINE_FIELDS = ("name", "url", "method", "baseline_cron", "timezone")
# The executor owns message framing; a copy given by a person would contradict what is
# sent, so it is refused here rather than dropped silently at send time.
FRAMING_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection"})

Problems = dict[str, list[str]]

MIN_INTERVAL_MS = 1_000
# Every interval and bound is at most a year: what the governor can plan.
MAX_INTERVAL_MS = MAX_PLANNABLE_MS
MIN_TIMEOUT_MS = 1_000
MAX_TIMEOUT_MS = 30 * 60 * 1_000
MAX_RESPONSE_KB = 10_000


def check_endpoint_values(endpoint: Any, exclude: Iterable[str] = ()) -> Problems:
    """Shape, type, characters and size of the values a person gives; never raises."""
    skip = set(exclude)
    problems: Problems = {}

    def add(field: str, message: str) -> None:
        problems.setdefault(field, []).append(message)

    for field in (*WHOLE_NUMBER_FIELDS, *LINE_FIELDS, "description", "headers", "body"):
        if field not in skip and (message := null_problem(endpoint, field)):
            add(field, message)
    for field in WHOLE_NUMBER_FIELDS:
        if field in problems or field in skip:
            continue
        value = getattr(endpoint, field)
        message = whole_number_problem(value)
        if not message and field in DURATION_FIELDS:
            message = longest_problem(value)
        if message:
            add(field, message)
    for field in LINE_FIELDS:
        if field in problems or field in skip:
            continue
        if message := line_problem(getattr(endpoint, field)):
            add(field, message)
    checks = {
        "name": lambda: name_problem(endpoint.name),
        "description": lambda: description_problem(endpoint.description),
        "headers": lambda: headers_problem(endpoint.headers),
        "secret_header_names": lambda: secret_names_problem(endpoint.secret_header_names),
        "body": lambda: body_problem(endpoint.body),
    }
    for field, check in checks.items():
        if field not in skip and field not in problems and (message := check()):
            add(field, message)
    return problems


def check_text_values(
    instance: Any, exclude: Iterable[str] = (), *, in_refs: bool = False
) -> Problems:
    """Names, descriptions and a tenant's HMAC secret: no control characters, capped.
    ``in_refs``: the name appears in ``job/endpoint`` references, so it has no '/'."""
    skip = set(exclude)
    problems: Problems = {
        field: [message]
        for field in ("name", "description")
        if field not in skip and hasattr(instance, field)
        if (message := null_problem(instance, field))
    }
    name = instance.name
    message = line_problem(name) or (name_problem(name) if in_refs else "")
    if "name" not in skip and "name" not in problems and message:
        problems["name"] = [message]
    description = getattr(instance, "description", None)
    if "description" not in skip and (message := description_problem(description)):
        problems.setdefault("description", [message])
    secret = getattr(instance, "hmac_secret", None)
    if "hmac_secret" not in skip and (message := line_problem(secret)):
        # The message never repeats the secret.
        problems["hmac_secret"] = [message]
    return problems


# A tenant's host rate limits (``Tenant.host_rate_limits``): host -> requests per second.
MAX_RATE_LIMIT_HOSTS = 100
MAX_REQUESTS_PER_SECOND = 10_000
_HOST_LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
RATE_LIMIT_HOST = re.compile(rf"{_HOST_LABEL}(?:\.{_HOST_LABEL})*\Z")


def host_rate_limits_problem(limits: Any) -> str:
    """A mapping of host names (as in the endpoints' URLs, lower case, no scheme, port or
    path) to whole requests per second, 1 to ``MAX_REQUESTS_PER_SECOND``; 0 exempts a
    host from ``CRONICORN_HOST_RATE_LIMIT``."""
    example = 'for example {"api.partner.com": 20}'
    if limits is None:
        return f"Give a mapping of host to requests per second ({example}), or {{}} for none."
    if not isinstance(limits, dict):
        return (
            f"Expected a mapping of host to requests per second ({example}), got {_kind(limits)}."
        )
    if len(limits) > MAX_RATE_LIMIT_HOSTS:
        return f"At most {MAX_RATE_LIMIT_HOSTS} hosts may be limited; {len(limits)} are given."
    for host, rate in limits.items():
        if not isinstance(host, str) or len(host) > 253 or not RATE_LIMIT_HOST.match(host):
            shown = host if isinstance(host, str) else _kind(host)
            hint = (
                f" (write {host.lower()!r})"
                if isinstance(host, str) and host != host.lower()
                else ""
            )
            return (
                f"{str(shown)[:80]!r} is not a host name{hint}: write the host alone, in lower "
                f"case, as it appears in the endpoints' URLs, {example} (no scheme, port or path)."
            )
        if isinstance(rate, bool) or not isinstance(rate, int):
            return (
                f"The limit of {host} must be a whole number of requests per second, "
                f"got {_kind(rate)}."
            )
        if not 0 <= rate <= MAX_REQUESTS_PER_SECOND:
            return (
                f"The limit of {host} must be between 1 and {MAX_REQUESTS_PER_SECOND} requests "
                f"per second (0 exempts it from the default limit), got {rate}."
            )
    return ""


def merge_problems(error: ValidationError | None, problems: Problems) -> ValidationError | None:
    """One ValidationError holding both (either may be empty)."""
    merged: Problems = {k: list(v) for k, v in problems.items()}
    if error is not None:
        for field, messages in error.message_dict.items():
            merged.setdefault(field, []).extend(messages)
    return ValidationError(merged) if merged else None


# --- single values ------------------------------------------------------------------


def null_problem(instance: Any, field: str) -> str:
    """Django skips its checks of an empty value in a ``blank=True`` field, even when the
    column is NOT NULL, so None would reach the database."""
    if getattr(instance, field) is not None or instance._meta.get_field(field).null:
        return ""
    return 'Give a value here (it cannot be null); leave it empty as "" or {} instead.'


def whole_number_problem(value: Any) -> str:
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return ""
    if isinstance(value, str) and re.fullmatch(r"\s*[+-]?\d{1,18}\s*", value):
        return ""  # Django reads "5000" as 5000, as a form or a file would send it
    return f"Enter a whole number of milliseconds (e.g. 30000); got {_kind(value)}."


def longest_problem(value: Any, *, maximum: int = MAX_DURATION_MS) -> str:
    """A whole number of ms above ``maximum`` (a year): the governor could not plan it."""
    try:
        number = int(value) if isinstance(value, int | str) and value != "" else None
    except ValueError:
        return ""
    if number is not None and number > maximum:
        return (
            f"At most {maximum} ms ({maximum // 86_400_000} days) is allowed; got {number}. "
            "Use a shorter duration."
        )
    return ""


def duration_from_ms(value: Any, *, field: str, minimum: int = 1) -> timedelta:
    """``value`` ms as a timedelta, for an operation's duration argument (a pause, a
    hint's time to live, ...): a whole number from ``minimum`` to a year, else a
    ValidationError naming ``field``. Never an OverflowError, whatever the caller sent."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValidationError(
            {field: [f"Enter a whole number of milliseconds; got {_kind(value)}."]}
        )
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        raise ValidationError({field: [f"Enter a whole number of milliseconds; got {value!r}."]})
    number = int(value)
    if number < minimum:
        raise ValidationError({field: [f"Must be at least {minimum} ms; got {number}."]})
    if message := longest_problem(number):
        raise ValidationError({field: [message]})
    return timedelta(milliseconds=number)


def hint_problem(
    interval_ms: Any, next_run_at: datetime | None, ttl: timedelta, now: datetime
) -> str:
    """What is wrong with a hint (any interface: REST, MCP, admin, CLI, planner), or ""."""
    if interval_ms is not None:
        if isinstance(interval_ms, bool) or not isinstance(interval_ms, int):
            return f"A hinted interval is a whole number of ms; got {_kind(interval_ms)}."
        if message := longest_problem(interval_ms):
            return f"interval_ms: {message}"
    if ttl > timedelta(milliseconds=MAX_DURATION_MS):
        return f"A hint holds at most a year ({MAX_DURATION_MS} ms); got {ttl}."
    if next_run_at is not None and next_run_at - now > timedelta(milliseconds=MAX_DURATION_MS):
        return "A one-shot run may be at most a year ahead; pick an earlier time."
    if next_run_at is not None and next_run_at >= now + ttl:
        # The governor ignores a hint once it expires (strictly before its end), so a
        # one-shot at or after its expiry would be lost at the next plan.
        minutes = int((next_run_at - now).total_seconds() // 60) + 1
        return (
            f"The one-shot at {next_run_at:%Y-%m-%d %H:%M:%S} UTC would come after its hint "
            f"expires ({now + ttl:%Y-%m-%d %H:%M:%S} UTC), and an expired hint never runs: "
            f"give a time to live of at least {minutes} minutes, or an earlier time."
        )
    return ""


def pause_problem(until: datetime, now: datetime) -> str:
    """A pause longer than a year (archive the endpoint instead), or ""."""
    if until - now > timedelta(milliseconds=MAX_DURATION_MS):
        latest = now + timedelta(milliseconds=MAX_DURATION_MS)
        return (
            f"A pause lasts at most a year (until {latest:%Y-%m-%d}); pause for less, or "
            "archive the endpoint."
        )
    return ""


def line_problem(value: Any) -> str:
    if not isinstance(value, str):
        return "" if value is None else f"Enter text; got {_kind(value)}."
    if LINE_FORBIDDEN.search(value):
        return "Remove the control characters (line breaks, tabs, NUL); this is one line of text."
    return unencodable_problem(value)


def name_problem(value: Any) -> str:
    if isinstance(value, str) and "/" in value:
        return "Names cannot contain '/': it separates job and endpoint in job/endpoint."
    return ""


def description_problem(value: Any) -> str:
    if value is None or value == "":
        return ""
    if not isinstance(value, str):
        return f"Enter text; got {_kind(value)}."
    cap = settings.CRONICORN_MAX_DESCRIPTION_CHARS
    if len(value) > cap:
        return (
            f"Keep the description under {cap} characters (it goes into every planner "
            f"prompt); it has {len(value)}."
        )
    if TEXT_FORBIDDEN.search(value):
        return "Remove the control characters (NUL and the like); tabs and line breaks are fine."
    return unencodable_problem(value)


MAX_REASON_CHARS = 1_000


def reason_problem(value: Any) -> str:
    """A reason for a pause or hint (a person's, a command's or the planner's)."""
    if not isinstance(value, str):
        return f"A reason must be text; got {_kind(value)}."
    if len(value) > MAX_REASON_CHARS:
        return f"Keep the reason under {MAX_REASON_CHARS} characters; it has {len(value)}."
    if TEXT_FORBIDDEN.search(value) or unencodable_problem(value):
        return "Remove the control characters (NUL and the like) from the reason."
    return ""


def headers_problem(headers: Any) -> str:
    example = 'e.g. {"X-Key": "v"}'
    if not isinstance(headers, dict):
        return f"Headers must be an object of names to string values, {example}."
    if len(headers) > settings.CRONICORN_MAX_HEADERS:
        return f"Send at most {settings.CRONICORN_MAX_HEADERS} headers; there are {len(headers)}."
    seen: set[str] = set()
    for name, value in headers.items():
        if message := header_name_problem(name):
            return message
        if name.lower() in seen:
            return f"Header {name!r} is given twice (names ignore letter case); keep one."
        if name.lower() in FRAMING_HEADERS:
            return f"Cronicorn sets {name!r} itself for each request; remove it."
        seen.add(name.lower())
        if not isinstance(value, str):
            return (
                f"Headers must be an object of names to string values, {example}; the "
                f"value of {name!r} is {_kind(value)}."
            )
        # The messages name the header, never its value: it may be a secret.
        if HEADER_VALUE_FORBIDDEN.search(value) or unencodable_problem(value):
            return (
                f"The value of header {name!r} holds a control character (a line break, "
                "NUL...) or invalid Unicode; HTTP forbids them. Remove it."
            )
        if len(value) > settings.CRONICORN_MAX_HEADER_VALUE_CHARS:
            return (
                f"The value of header {name!r} is longer than "
                f"{settings.CRONICORN_MAX_HEADER_VALUE_CHARS} characters; shorten it."
            )
    return ""


def header_name_problem(name: Any) -> str:
    if not isinstance(name, str) or not HEADER_NAME.match(name):
        shown = repr(name)[:60] if isinstance(name, str) else _kind(name)
        return (
            f"{shown} is not a header name: use letters, digits and !#$%&'*+-.^_`|~ "
            "(no spaces, colons or control characters)."
        )
    return ""


def secret_names_problem(names: Any) -> str:
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        return 'Secret header names must be a list of strings, e.g. ["Authorization"].'
    if len(names) > settings.CRONICORN_MAX_HEADERS:
        return f"List at most {settings.CRONICORN_MAX_HEADERS} secret header names."
    for name in names:
        if message := header_name_problem(name):
            return message
    return ""


def body_problem(body: Any) -> str:
    """Plain JSON (no NaN or Infinity, which PostgreSQL refuses), bounded in depth and size."""
    if message := json_shape_problem(body, max_depth=settings.CRONICORN_MAX_JSON_DEPTH):
        return f"The body {message}."
    size = len(json.dumps(body, ensure_ascii=False).encode())
    if size > settings.CRONICORN_MAX_BODY_BYTES:
        return (
            f"Keep the body under {settings.CRONICORN_MAX_BODY_BYTES} bytes of JSON; it has {size}."
        )
    return ""


def json_shape_problem(
    value: Any, *, max_depth: int, max_nodes: int = 1_000_000, json_scalars: bool = True
) -> str:
    """What keeps ``value`` from being plain JSON within ``max_depth`` levels, or "".

    Walked with an explicit stack (a recursive walk, and ``json.dumps``, would end in a
    RecursionError on a deep value); shared or repeated objects (YAML aliases) count each
    time they are reached, up to ``max_nodes``, so a value that expands hugely is refused
    after ``max_nodes`` steps. ``json_scalars=False`` checks only depth and size (a parsed
    file, whose scalars the reader checks key by key with located messages)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    nodes = 0
    while stack:
        item, depth = stack.pop()
        nodes += 1
        if depth > max_depth:
            return f"is nested more than {max_depth} levels deep; flatten it"
        if nodes > max_nodes:
            return f"has more than {max_nodes} values; make it smaller"
        if isinstance(item, dict):
            if json_scalars and (problem := _keys_problem(item)):
                return problem
            stack.extend((child, depth + 1) for child in item.values())
        elif isinstance(item, list):
            stack.extend((child, depth + 1) for child in item)
        elif json_scalars and (problem := json_scalar_problem(item)):
            return problem
    return ""


def _keys_problem(item: dict[Any, Any]) -> str:
    if not all(isinstance(key, str) for key in item):
        return "has an object key that is not text; quote it"
    if any("\x00" in key or unencodable_problem(key) for key in item):
        return "has an object key with NUL or invalid Unicode; remove it"
    return ""


# A JSON string (escapes included) or a bracket: enough to measure nesting without
# parsing, in one linear pass (the unrolled form never backtracks).
_JSON_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')


def json_text_depth_problem(text: str, *, max_depth: int) -> str:
    """Whether JSON ``text`` nests deeper than ``max_depth``, found before parsing it:
    Python's parser recurses, and a few thousand brackets end in a RecursionError."""
    depth = 0
    for match in _JSON_TOKENS.finditer(text):
        token = match.group()
        if token in ("[", "{"):
            depth += 1
            if depth > max_depth:
                return f"is nested more than {max_depth} levels deep; flatten it"
        elif token in ("]", "}"):
            depth -= 1
    return ""


def _kind(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "text", bool: "true/false"}
    if value is None:
        return "nothing (null)"
    if type(value) in names:
        return names[type(value)]
    return f"a value of type {type(value).__name__}"


def validate_endpoint_url(value: str) -> None:
    """An absolute http(s) URL with a host. Unlike Django's URLValidator it accepts
    single-label hosts (``http://web:8000``), as in docker-compose service names; what a
    host may resolve to is the executor's SSRF guard's business, not the form's."""
    if "://" not in value:
        raise ValidationError("Enter a valid URL, e.g. https://example.com/health.")
    if not value.lower().startswith(("http://", "https://")):
        raise ValidationError("Only http:// and https:// URLs can be called.")
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError on a malformed port
    except ValueError as exc:
        raise ValidationError(f"Enter a valid URL ({exc}).") from None
    if not parts.hostname or any(ch.isspace() for ch in value):
        raise ValidationError("Enter a valid URL, e.g. https://example.com/health.")
    try:
        httpx.URL(value).host  # noqa: B018 - the executor's parse: xn-- labels decoded
    except (httpx.InvalidURL, UnicodeError) as exc:
        raise ValidationError(
            f"The host name is not valid ({exc}); check the xn-- or non-ASCII labels."
        ) from None


def whole_number(instance: Any, field: str) -> int | None:
    """The field's value if it is a whole number (not a bool), else None: rules across
    fields compare only values that passed the shape checks."""
    value = getattr(instance, field)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def check_schedule(endpoint: Any, add: Callable[[str, str], None], *, floor: int) -> None:
    """Exactly one of cron or interval, a valid zone and cron, nothing below the floors."""
    cron = endpoint.baseline_cron if isinstance(endpoint.baseline_cron, str) else ""
    interval = whole_number(endpoint, "baseline_interval_ms")
    has_cron = bool(cron.strip())
    has_interval = endpoint.baseline_interval_ms is not None
    if has_cron and has_interval:
        add("baseline_cron", "Give either a cron expression or an interval, not both.")
    elif not has_cron and not has_interval:
        add(
            "baseline_interval_ms",
            "Give a schedule: a cron expression or an interval (e.g. 5m).",
        )
    zone_ok = False
    try:
        validate_timezone(endpoint.timezone if isinstance(endpoint.timezone, str) else "")
        zone_ok = True
    except ScheduleError as exc:
        add("timezone", str(exc))
    if has_cron:
        try:
            endpoint.baseline_cron = normalize_cron(cron)
        except ScheduleError as exc:
            add("baseline_cron", str(exc))
        else:
            if zone_ok:
                _check_cron_floor(endpoint, add, floor)
    if interval is not None and interval < MIN_INTERVAL_MS:
        add(
            "baseline_interval_ms",
            f"The interval must be at least 1 s (1000 ms); got {interval} ms.",
        )
    if interval is not None and MIN_INTERVAL_MS <= interval < floor:
        add(
            "baseline_interval_ms",
            f"This tenant's plan allows intervals of at least {floor} ms "
            f"({format_interval(floor)}).",
        )


def _check_cron_floor(endpoint: Any, add: Callable[[str, str], None], floor: int) -> None:
    if floor <= 60_000:
        return  # cron never fires more often than once a minute
    gap = shortest_cron_gap_ms(endpoint.baseline_cron, endpoint.timezone)
    if gap < floor:
        add(
            "baseline_cron",
            f"This cron fires {format_interval(gap)} apart at times, but this tenant's "
            f"plan allows runs at least {format_interval(floor)} apart; choose a "
            "sparser schedule.",
        )


def check_bounds(endpoint: Any, add: Callable[[str, str], None], *, floor: int) -> None:
    """min and max: not negative, min not above max, max not below the tenant's floor."""
    low, high = whole_number(endpoint, "min_interval_ms"), whole_number(endpoint, "max_interval_ms")
    for field, value in (("min_interval_ms", low), ("max_interval_ms", high)):
        if value is not None and value < 0:
            add(field, "Bounds cannot be negative; leave empty (or 0) for no bound.")
    if low and high and low > high:
        add(
            "min_interval_ms",
            f"The minimum interval ({low} ms) is above the maximum "
            f"({high} ms); lower the minimum or raise the maximum.",
        )
    if high is not None and 0 < high < floor:
        # Else the max would bring runs closer than the tenant's plan allows.
        add(
            "max_interval_ms",
            f"The maximum interval ({format_interval(high)}) is below this tenant's "
            f"shortest interval ({format_interval(floor)}); raise it or leave it empty.",
        )


def quota_problem(tenant: Any, *, live_after: int) -> str:
    """Why ``tenant`` cannot have ``live_after`` live endpoints, or ""."""
    if live_after <= tenant.max_endpoints:
        return ""
    return (
        f"{tenant.name} would have {live_after} endpoints but max_endpoints is "
        f"{tenant.max_endpoints}; archive one or ask an administrator to raise the quota."
    )


def check_run_policy(
    policy: Any,
    add: Callable[[str, str], None],
    *,
    job_policy: Any = None,
    stored: Any = None,
    now: datetime | None = None,
) -> None:
    """A job's or an endpoint's run policy (``endpoints.policies``), alone and over its
    job's; a one-off time set now (not the ``stored`` one) must be after ``now``."""
    problems = policy_problems(policy)
    if not problems and now is not None:
        problems += [problem] if (problem := past_one_off(policy, stored, now)) else []
    for problem in problems:
        add("run_policy", problem)
    if not problems and job_policy:
        try:
            resolve_policy(job_policy, policy)
        except PolicyError as exc:
            add("run_policy", f"With the job's defaults: {exc}")


def check_overlap_limit(
    job: Any,
    add: Callable[[str, str], None],
    field: str,
    layers: Iterable[Any],
    endpoints: Iterable[Any] = (),
) -> None:
    """``overlap: {"allow": N}`` does not go with a job's ``max_concurrent``: the limit
    counts the endpoints whose slots are claimed, and under ``allow`` a call in flight
    holds no claim, so the limit would not count it. ``layers``: the run policies an
    endpoint runs by, each over the one before (a job's; an endpoint's job's and its
    own); ``endpoints``: a job's endpoints whose own policy allows overlap (read only when
    the job has a limit)."""
    limit = job.max_concurrent
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        return
    runs_by: dict[str, Any] = {}
    for layer in layers:
        runs_by.update(layer if isinstance(layer, dict) else {})
    allowed = isinstance(runs_by.get("overlap"), dict)
    if not allowed and not any(e.archived_at is None for e in endpoints):
        return
    add(
        field,
        f'overlap: {{"allow": N}} runs calls side by side, which job {job.name}\'s '
        f"max_concurrent ({limit}) would not count: use one or the other (leave "
        'max_concurrent empty, or use overlap "wait" or "skip").',
    )


def check_request_limits(endpoint: Any, add: Callable[[str, str], None]) -> None:
    """The request's timeout and response size cap within their ranges."""
    timeout = whole_number(endpoint, "timeout_ms")
    if timeout is not None and not MIN_TIMEOUT_MS <= timeout <= MAX_TIMEOUT_MS:
        add(
            "timeout_ms",
            f"Timeout must be between 1 s and 30 min "
            f"({MIN_TIMEOUT_MS}..{MAX_TIMEOUT_MS} ms); got {timeout}.",
        )
    size = whole_number(endpoint, "max_response_size_kb")
    if size is not None and not 1 <= size <= MAX_RESPONSE_KB:
        add(
            "max_response_size_kb",
            f"Response size cap must be 1..{MAX_RESPONSE_KB} KB; got {size}.",
        )


def check_hint(endpoint: Any, add: Callable[[str, str], None]) -> None:
    """An interval hint of at least a second and at most the longest plannable; an expiry
    for any hint."""
    hint = whole_number(endpoint, "ai_hint_interval_ms")
    if hint is not None and hint < MIN_INTERVAL_MS:
        add("ai_hint_interval_ms", "A hinted interval must be at least 1 s (1000 ms).")
    if message := longest_problem(hint):
        add("ai_hint_interval_ms", message)
    if (
        endpoint.ai_hint_interval_ms is not None or endpoint.ai_hint_next_run_at
    ) and not endpoint.ai_hint_expires_at:
        add("ai_hint_expires_at", "A hint needs an expiry time.")


def clean_fields_checked(
    instance: Any, exclude: Any, problems: Problems, clean_fields: Callable[..., None]
) -> None:
    """Django's field checks (``clean_fields``, the model's own) on what ``problems`` did
    not already refuse, then both. The refused fields are remembered
    (``refused_fields``): ``clean()``, which ``full_clean`` calls anyway, must not compare
    or query with their values."""
    error = None
    try:
        clean_fields(exclude={*(exclude or ()), *problems})
    except ValidationError as exc:
        error = exc
    merged = merge_problems(error, problems)
    instance._refused_fields = frozenset(merged.message_dict if merged else ())
    if merged:
        raise merged


def refused_fields(instance: Any) -> frozenset[str]:
    refused: frozenset[str] = getattr(instance, "_refused_fields", frozenset())
    return refused
