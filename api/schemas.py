"""The API's request and response shapes (pydantic v2 through ninja). The same classes
give the OpenAPI document and the MCP tools' JSON schemas.

Durations are milliseconds and times ISO 8601 (UTC), as in the models.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, time
from typing import Annotated, Any, Literal

from django.conf import settings
from ninja import Field, Schema
from pydantic import (
    AfterValidator,
    BeforeValidator,
    ConfigDict,
    StrictBool,
    StrictInt,
    StringConstraints,
    WithJsonSchema,
)
from pydantic.json_schema import JsonDict

from endpoints.choices import DEFAULT_HINT_TTL_MS, PauseSource
from endpoints.models import (
    HintKind,
    JobStatus,
    RunStatus,
    RunTrigger,
    Source,
)
from endpoints.secrets import mask_headers, redact_url
from endpoints.validation import (
    MAX_DURATION_MS,
    MAX_INTERVAL_MS,
    MAX_REASON_CHARS,
    MAX_RESPONSE_KB,
    MAX_TIMEOUT_MS,
    MIN_INTERVAL_MS,
    MIN_TIMEOUT_MS,
)

# RFC 3339, as JSON Schema's "date-time" format says: a date, a time with seconds, and an
# offset. pydantic alone would also take a bare number (a Unix time), a date without a
# time or a time without an offset, none of which the document promises.
RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")
CLOCK = r"^([01]\d|2[0-3]):[0-5]\d(:[0-5]\d(\.\d+)?)?([Zz]|[+-]00:00)?$"


def _rfc3339(value: Any) -> Any:
    if isinstance(value, datetime):
        return value
    if not isinstance(value, str) or not RFC3339.match(value.strip()):
        raise ValueError(
            "Write the time as ISO 8601 with seconds and an offset, e.g. 2026-03-01T14:30:00Z."
        )
    return value.strip()


def _in_utc(value: datetime) -> datetime:
    """Stored and compared in UTC (PostgreSQL refuses offsets beyond 15:59)."""
    try:
        return value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC)
    except OverflowError:
        raise ValueError("The time is out of range; give a year between 1 and 9999.") from None


def _clock(value: Any) -> Any:
    if isinstance(value, time):
        return value
    if not isinstance(value, str) or not re.match(CLOCK, value.strip()):
        raise ValueError("Write a UTC clock time as HH:MM (or HH:MM:SS), e.g. 22:00.")
    return value.strip()


def _utc_clock(value: time) -> time:
    """Quiet hours are UTC clock times (the column has no zone): ``22:00`` or ``22:00Z``."""
    return value.replace(tzinfo=None)


IsoTime = Annotated[
    datetime,
    BeforeValidator(_rfc3339),
    AfterValidator(_in_utc),
    WithJsonSchema({"type": "string", "format": "date-time"}),
]
ClockTime = Annotated[
    time,
    BeforeValidator(_clock),
    AfterValidator(_utc_clock),
    WithJsonSchema({"type": "string", "pattern": CLOCK}),
]
JobStatusFilter = Literal["active", "paused", "archived"]
RunStatusFilter = Literal["running", "success", "failure", "timeout", "lost"]
Method = Literal["GET", "POST", "PUT", "PATCH", "DELETE"]
ChannelKindName = Literal["email", "webhook", "apprise"]

# One rule for the types and bounds of every request body, REST and MCP alike: each is
# pydantic's own (strict numbers and switches, ge/le, min_length/max_length), so the
# document states exactly what the server refuses, from the same constants, whatever the
# database (SQLite's integers are 64-bit). Strict: a JSON true is not the number 1 nor 1
# the switch true. The forms then check what no schema says (a cron's syntax, a name
# taken, the tenant's floor), with their own messages.
Int = StrictInt
Bool = StrictBool
POSITIVE_INT_MAX = 2_147_483_647  # PositiveIntegerField on PostgreSQL
Id = Annotated[StrictInt, Field(ge=1, le=2**63 - 1)]  # PostgreSQL's bigint
Name = Annotated[str, StringConstraints(min_length=1, max_length=200)]
Description = Annotated[str, StringConstraints(max_length=settings.CRONICORN_MAX_DESCRIPTION_CHARS)]
Reason = Annotated[str, StringConstraints(max_length=MAX_REASON_CHARS)]
HeaderValue = Annotated[
    str, StringConstraints(max_length=settings.CRONICORN_MAX_HEADER_VALUE_CHARS)
]


def _no_default(schema: JsonDict) -> None:
    schema.pop("default", None)


def optional(**kwargs: Any) -> Any:
    """A field that may be left out (a PATCH leaves it unchanged, a create takes the
    default) but is never null: the document shows no null and no default for it."""
    return Field(None, json_schema_extra=_no_default, **kwargs)


def _enum(*values: str) -> JsonDict:
    return {"enum": list(values)}


class Problem(Schema):
    """An RFC 9457 problem (``application/problem+json``)."""

    type: str = "about:blank"
    title: str
    status: int
    detail: str
    errors: dict[str, list[str]] = Field(
        default_factory=dict, description="Messages per field, when the input was invalid."
    )


class Input(Schema):
    """A request body: an unknown key (a typo) is an error, not silently ignored."""

    model_config = ConfigDict(extra="forbid")


class Message(Schema):
    detail: str


RUN_POLICY: Any = Field(
    None,
    description="Run policy: success criteria, retries, backoff cap, breaker, catch-up "
    "window, jitter, windows (blackout, allowed, active_from/active_until as ISO 8601 "
    "date-times with an offset, run_once_at for a one-off), calendars (exclude_dates "
    '["2026-12-24..2026-12-26"], holidays {"country": "DE", "subdivision": "BY"}), '
    'overlap ("wait", "skip" or {"allow": N}, N from 1 to 10: calls in flight at once), '
    'follow_ups (keys in the README, "Run policies"); {} for the defaults.',
)


class PlannedRun(Schema):
    utc: datetime
    local: str = Field(description="The same instant in the endpoint's time zone.")
    source: str


class RunPreview(Schema):
    timezone: str
    runs: list[PlannedRun]


# --- jobs -------------------------------------------------------------------------------


JOB_NAME = "Unique within the tenant; no '/' (it appears in job/endpoint references)."
JOB_DESCRIPTION = "What the job is for; the planner reads it."
MAX_CONCURRENT = "Most of its runs in flight at once (at least 1); null for no limit."


class JobIn(Input):
    """A new job."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [{"name": "shop", "description": "The shop's health checks."}]
        },
    )

    name: Name = Field(description=JOB_NAME)
    description: Description = Field("", description=JOB_DESCRIPTION)
    max_concurrent: Int | None = Field(None, description=MAX_CONCURRENT, ge=1, le=POSITIVE_INT_MAX)
    run_policy: dict[str, Any] | None = RUN_POLICY
    tenant_id: Id | None = Field(
        None, description="Needed only when the caller belongs to several tenants."
    )


class JobPatch(Input):
    """The fields to change; the others stay."""

    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"max_concurrent": 2}]}
    )

    name: Name = optional(description=JOB_NAME)
    description: Description | None = Field(None, description=JOB_DESCRIPTION + " Null: empty.")
    max_concurrent: Int | None = Field(None, description=MAX_CONCURRENT, ge=1, le=POSITIVE_INT_MAX)
    run_policy: dict[str, Any] | None = RUN_POLICY


class JobOut(Schema):
    id: int
    tenant_id: int
    name: str
    description: str
    status: str = Field(
        description="active, paused (none of its endpoints runs) or archived (stopped for "
        "good, history kept; unarchive_job brings it back paused).",
        json_schema_extra=_enum(*JobStatus.values),
    )
    max_concurrent: int | None
    run_policy: dict[str, Any]
    created_at: datetime
    updated_at: datetime


class JobPage(Schema):
    items: list[JobOut]
    next_cursor: str | None = Field(description="Pass as ?cursor= for the next page.")


# --- endpoints --------------------------------------------------------------------------


class EndpointPatch(Input):
    """Only the fields given change (PATCH); a schedule change replans the endpoint."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"baseline_interval_ms": 600_000, "baseline_cron": ""}]},
    )

    job_id: Id = optional(description="Move it to this job (of the same tenant).")
    name: Name = optional(description="Unique within its job; no '/'.")
    description: Description | None = Field(
        None,
        description="What the endpoint does and what its answers mean; the planner reads "
        "it. Null: empty.",
    )
    url: str = optional(
        description="The http:// or https:// URL to call (private addresses are refused).",
        min_length=1,
        max_length=2000,
    )
    method: Method = optional(description="The HTTP method (default GET).")
    headers: dict[str, HeaderValue] = optional(
        description="Header names to string values sent with each call; a masked value "
        "(as answers show secret ones) keeps the stored one.",
        max_length=settings.CRONICORN_MAX_HEADERS,
    )
    secret_header_names: list[str] = optional(
        description="Headers whose values are secrets: masked in every answer and log.",
        max_length=settings.CRONICORN_MAX_HEADERS,
    )
    body: Any = Field(None, description="JSON sent with POST, PUT and PATCH.")
    timeout_ms: Int = optional(
        description=f"Give up after this long, {MIN_TIMEOUT_MS}..{MAX_TIMEOUT_MS} ms "
        "(default 30000).",
        ge=MIN_TIMEOUT_MS,
        le=MAX_TIMEOUT_MS,
    )
    max_response_size_kb: Int = optional(
        description=f"Keep at most this much of an answer, 1..{MAX_RESPONSE_KB} KB (default 100).",
        ge=1,
        le=MAX_RESPONSE_KB,
    )
    baseline_cron: str | None = Field(
        None,
        description="The schedule as cron: 5 fields or @hourly, @daily...; empty (or null) "
        "when the schedule is an interval. Give a cron or an interval, not both.",
        max_length=200,
    )
    timezone: str = optional(
        description="The IANA time zone the cron is read in (default UTC).", max_length=64
    )
    baseline_interval_ms: Int | None = Field(
        None,
        description=f"The schedule as an interval: every this many ms (at least {MIN_INTERVAL_MS}, "
        "and the tenant's floor); null when the schedule is a cron.",
        ge=MIN_INTERVAL_MS,
        le=MAX_INTERVAL_MS,
    )
    min_interval_ms: Int | None = Field(
        None,
        description="Never run sooner than this after the previous run, whatever hints say; "
        "0 or null: no bound.",
        ge=0,
        le=MAX_INTERVAL_MS,
    )
    max_interval_ms: Int | None = Field(
        None,
        description="Never wait longer than this between runs; 0 or null: no bound.",
        ge=0,
        le=MAX_INTERVAL_MS,
    )
    run_policy: dict[str, Any] | None = RUN_POLICY


class EndpointIn(EndpointPatch):
    """A new endpoint: a job, a name, a URL, and a schedule (a cron or an interval)."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "job_id": 1,
                    "name": "orders-health",
                    "url": "https://shop.example.com/health",
                    "baseline_interval_ms": 300_000,
                    "max_interval_ms": 3_600_000,
                }
            ],
            # Exactly one schedule: a non-blank cron, or an interval.
            "oneOf": [
                {
                    "required": ["baseline_cron"],
                    "properties": {"baseline_cron": {"type": "string", "pattern": "\\S"}},
                },
                {
                    "required": ["baseline_interval_ms"],
                    "properties": {"baseline_interval_ms": {"type": "integer"}},
                },
            ],
        },
    )

    job_id: Id = Field(description="The job it belongs to (see list_jobs).")
    name: Name = Field(description="Unique within its job; no '/'.")
    url: str = Field(
        description="The http:// or https:// URL to call (private addresses are refused).",
        min_length=1,
        max_length=2000,
    )


class EndpointOut(Schema):
    id: int
    job_id: int
    name: str
    description: str
    url: str
    method: str
    headers: dict[str, Any] = Field(description="Secret values masked.")
    secret_header_names: list[Any]
    body: Any
    timeout_ms: int
    max_response_size_kb: int
    baseline_cron: str
    timezone: str
    baseline_interval_ms: int | None
    min_interval_ms: int | None
    max_interval_ms: int | None
    ai_hint_interval_ms: int | None
    ai_hint_next_run_at: datetime | None
    ai_hint_expires_at: datetime | None
    ai_hint_reason: str
    paused_until: datetime | None
    pause_reason: str
    pause_source: str = Field(
        description="Who paused it: person, planner, breaker (its end is a probe run), "
        "breaker-held (until a person resumes it); empty when not paused.",
        json_schema_extra=_enum("", *PauseSource.values),
    )
    failure_count: int
    last_run_at: datetime | None
    archived_at: datetime | None
    next_run_at: datetime | None = Field(
        description="When it runs next; null when archived, or when its runs have ended "
        "(next_run_source ended: the active period is over, or the one-off has run)."
    )
    next_run_source: str = Field(
        description="Which rule set the next run (see cronicorn://docs/governor).",
        json_schema_extra=_enum("", *Source.values),
    )
    run_policy: dict[str, Any] = Field(description="The run policy ({} for the defaults).")

    @staticmethod
    def resolve_headers(endpoint: Any) -> dict[str, Any]:
        # Secret values never leave the server; a masked value sent back keeps the stored one.
        return mask_headers(endpoint.headers, tuple(endpoint.secret_header_names or ()))

    @staticmethod
    def resolve_url(endpoint: Any) -> str:
        # A password in the URL is a secret too (the admin form masks it the same way).
        return redact_url(endpoint.url)


class EndpointDetail(EndpointOut):
    explanation: str = Field(description="The governor's account of the next run.")


class EndpointPage(Schema):
    items: list[EndpointOut]
    next_cursor: str | None


class PauseIn(Input):
    """Exactly one of until or for_ms."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [{"for_ms": 7_200_000, "reason": "database maintenance"}],
            "oneOf": [
                {"required": ["until"], "properties": {"until": {"type": "string"}}},
                {"required": ["for_ms"], "properties": {"for_ms": {"type": "integer"}}},
            ],
        },
    )

    until: IsoTime | None = Field(
        None, description="Pause until this time (ISO 8601, in the future)."
    )
    for_ms: Int | None = Field(
        None, ge=1, le=MAX_DURATION_MS, description="Or: pause for this many ms from now."
    )
    reason: Reason = Field("", description="Why; shown with the pause.")


class HintIn(Input):
    """Exactly one of interval_ms, next_run_at or next_run_in_ms."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"interval_ms": 30_000, "ttl_ms": 3_600_000, "reason": "deploy in progress"},
                {"next_run_in_ms": 600_000},
            ],
            "oneOf": [
                {"required": [name], "properties": {name: {"type": kind}}}
                for name, kind in (
                    ("interval_ms", "integer"),
                    ("next_run_at", "string"),
                    ("next_run_in_ms", "integer"),
                )
            ],
        },
    )

    interval_ms: Int | None = Field(
        None,
        ge=MIN_INTERVAL_MS,
        le=MAX_INTERVAL_MS,
        description="Run at this cadence (ms) instead of the baseline, e.g. 30000.",
        examples=[30_000],
    )
    next_run_at: IsoTime | None = Field(
        None, description="Or: run once at this time (ISO 8601), if before the next planned run."
    )
    next_run_in_ms: Int | None = Field(
        None,
        ge=0,
        le=MAX_DURATION_MS,
        description="Or: run once this many ms from now, e.g. 600000 for in 10 minutes.",
        examples=[600_000],
    )
    ttl_ms: Int | None = Field(
        None,
        ge=1,
        le=MAX_DURATION_MS,
        description="How long the hint lasts, in ms. Default: "
        f"{DEFAULT_HINT_TTL_MS[HintKind.INTERVAL]} (an hour) for an interval, "
        f"{DEFAULT_HINT_TTL_MS[HintKind.ONESHOT]} (30 minutes) for a one-shot. Both kinds share "
        "one expiry: a one-shot resets an active interval hint's expiry too. A one-shot must "
        "come before its hint expires (an expired hint never runs), or it is refused.",
    )
    reason: Reason = Field("", description="Why; shown with the hint.")


class HintedEndpointOut(EndpointOut):
    notice: str = Field(
        description="What else the hint changed, e.g. an active interval hint's new expiry; "
        "empty when nothing else changed."
    )


class ReasonIn(Input):
    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"reason": "incident over"}]}
    )

    reason: Reason = Field("", description="Why; kept in the hint history.")


# --- runs -------------------------------------------------------------------------------


class RunOut(Schema):
    id: int
    endpoint_id: int
    trigger: str = Field(
        description="What started it: scheduled, manual (run now), test (test_endpoint, "
        "never rescheduled), retry (of the run named in retry_of) or follow-up (after the "
        "run named in caused_by, run policy follow_ups).",
        json_schema_extra=_enum(*RunTrigger.values),
    )
    source: str = Field(description="The rule that planned it (next_run_source at the time).")
    status: str = Field(json_schema_extra=_enum(*RunStatus.values))
    scheduled_for: datetime
    started_at: datetime
    finished_at: datetime | None
    duration_ms: int | None
    status_code: int | None
    error: str
    delay_reason: str = Field(
        "",
        description="Why it started after its slot when its host's rate limit held it back "
        "(the tenant's host_rate_limits, or CRONICORN_HOST_RATE_LIMIT); empty otherwise.",
    )
    attempt: int
    retry_of: int | None = Field(description="The run this one retries, if it is a retry.")
    caused_by: int | None = Field(
        None, description="For a follow-up: the run of another endpoint it followed."
    )

    @staticmethod
    def resolve_retry_of(run: Any) -> int | None:
        return getattr(run, "retry_of_id", None)


class RunDetail(RunOut):
    request_method: str
    request_url: str
    response_body: Any
    response_truncated: bool
    response_size_bytes: int | None
    response_headers: dict[str, Any] | None


class RunPage(Schema):
    items: list[RunOut]
    next_cursor: str | None = Field(description="Pass as ?cursor= for older runs.")


# --- hint history and analysis sessions -------------------------------------------------


class HintOut(Schema):
    id: int
    endpoint_id: int
    kind: str
    interval_ms: int | None
    next_run_at: datetime | None
    paused_until: datetime | None
    expires_at: datetime | None
    reason: str
    created_at: datetime
    session_id: int | None


class HintPage(Schema):
    items: list[HintOut]
    next_cursor: str | None


class SessionOut(Schema):
    id: int
    endpoint_id: int
    backend: str
    model: str
    status: str
    started_at: datetime
    finished_at: datetime | None
    confidence: float | None
    total_tokens: int
    error: str


class SessionDetail(SessionOut):
    reasoning: str
    tool_calls: Any
    actions_taken: Any
    note: str


class AnalyzeIn(Input):
    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"backend": "rules"}]}
    )

    backend: Literal["rules", "llm"] | None = Field(
        None,
        description="rules (built in, no network) or llm (the configured model); default: "
        "the server's CRONICORN_PLANNER_BACKEND.",
    )


class SessionPage(Schema):
    items: list[SessionOut]
    next_cursor: str | None


# --- health, dashboard and the tenant -------------------------------------------------


class SchedulerHealth(Schema):
    last_tick_at: datetime | None
    last_tick_age_seconds: float | None
    due_backlog: int
    in_flight: int
    lateness_p50_ms: float | None
    lateness_p95_ms: float | None
    runs_last_hour: int
    failures_last_hour: int
    zombies: int


class WindowHealth(Schema):
    window: Literal["1h", "24h", "7d"]
    runs: int
    success_rate: float | None
    p50_duration_ms: float | None
    p95_duration_ms: float | None


class EndpointHealth(Schema):
    endpoint_id: int
    failures_in_a_row: int
    last_error: str
    windows: list[WindowHealth]


class HourStats(Schema):
    hour: datetime = Field(description="The hour's start (UTC).")
    runs: int
    failures: int = Field(description="Runs that failed, timed out or were lost.")


class FailingEndpoint(Schema):
    endpoint_id: int
    ref: str = Field(description="job/endpoint")
    failures_last_24h: int
    failures_in_a_row: int


class Dashboard(Schema):
    endpoints: int = Field(description="Live (not archived) endpoints.")
    failing: int = Field(description="Endpoints whose last run failed.")
    paused: int
    runs_last_24h: int
    failures_last_24h: int
    series: list[HourStats] = Field(description="Runs and failures per hour, the last 24 h.")
    source_mix: dict[str, int] = Field(
        description="Runs of the last 24 h by the rule that scheduled them (baseline-interval, "
        "ai-interval, clamped-min...; manual for run now and tests)."
    )
    top_failing: list[FailingEndpoint] = Field(
        description="The endpoints with the most failed runs in the last 24 h (at most 10)."
    )


class TenantOut(Schema):
    id: int
    name: str
    max_endpoints: int
    endpoints_used: int
    min_interval_ms: int
    monthly_token_budget: int
    host_rate_limits: dict[str, int] = Field(
        description="Requests per second per target host: runs on a host beyond its limit "
        "are delayed, never dropped, and a 429 with Retry-After from it pauses them until "
        "then. Hosts not named follow CRONICORN_HOST_RATE_LIMIT (0: none); 0 exempts one."
    )
    tokens_used_this_month: int
    tokens_reserved_now: int = Field(
        description="Held by analyses running now beyond what they spent so far: an LLM "
        "analysis reserves CRONICORN_LLM_SESSION_TOKENS before its first request and is "
        "settled to what it spent when it ends. Budget left: monthly_token_budget minus "
        "used minus reserved.",
    )
    signs_requests: bool
    previous_secret_signs_until: datetime | None = Field(
        None,
        description="During a rotation's grace period: until when the previous secret "
        "still signs requests, beside the current one.",
    )


class SigningSecretOut(Schema):
    secret: str = Field(description="The new request-signing secret. Shown this once only.")
    previous_secret_signs_until: datetime | None = Field(
        description="Until when the previous secret still signs requests (a second signature "
        "in X-Cronicorn-Signature), so receivers can switch at any time before then; null "
        "when the tenant signed nothing before."
    )
