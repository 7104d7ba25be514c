"""The API's request and response shapes (pydantic v2 through ninja). The same classes
give the OpenAPI document and the MCP tools' JSON schemas.

Durations are milliseconds and times ISO 8601 (UTC), as in the models.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from ninja import Field, Schema
from pydantic import ConfigDict

from endpoints.secrets import MASK, mask_headers, redact_url

RunStatusFilter = Literal["running", "success", "failure", "timeout", "lost"]
Method = Literal["GET", "POST", "PUT", "PATCH", "DELETE"]


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
    'window, jitter (keys in the README, "Run policies"); {} for the defaults.',
)


class PlannedRun(Schema):
    utc: datetime
    local: str = Field(description="The same instant in the endpoint's time zone.")
    source: str


class RunPreview(Schema):
    timezone: str
    runs: list[PlannedRun]


# --- jobs -------------------------------------------------------------------------------


class JobIn(Input):
    name: str = Field(description="Unique within the tenant.")
    description: str = Field("", description="Context for the planner.")
    max_concurrent: int | None = Field(None, description="Most runs in flight at once.")
    run_policy: dict[str, Any] | None = RUN_POLICY
    tenant_id: int | None = Field(
        None, description="Needed only when the caller belongs to several tenants."
    )


class JobPatch(Input):
    name: str | None = None
    description: str | None = None
    max_concurrent: int | None = None
    run_policy: dict[str, Any] | None = RUN_POLICY


class JobOut(Schema):
    id: int
    tenant_id: int
    name: str
    description: str
    status: str
    max_concurrent: int | None
    run_policy: dict[str, Any]
    created_at: datetime
    updated_at: datetime


class JobPage(Schema):
    items: list[JobOut]
    next_cursor: str | None = Field(description="Pass as ?cursor= for the next page.")


# --- endpoints --------------------------------------------------------------------------


class EndpointPatch(Input):
    """Only the fields given change (PATCH)."""

    job_id: int | None = None
    name: str | None = None
    description: str | None = None
    url: str | None = Field(None, description="http:// or https:// URL.")
    method: Method | None = None
    headers: dict[str, Any] | None = Field(
        None, description="Header names to string values; a masked value keeps the stored one."
    )
    secret_header_names: list[Any] | None = None
    body: Any = Field(None, description="JSON sent with POST, PUT and PATCH.")
    timeout_ms: int | None = Field(None, description="1000 .. 1800000.")
    max_response_size_kb: int | None = Field(None, description="1 .. 10000.")
    baseline_cron: str | None = Field(None, description="5 fields or @hourly…; or an interval.")
    timezone: str | None = Field(None, description="IANA name the cron is read in.")
    baseline_interval_ms: int | None = Field(None, description="Every … ms; or a cron.")
    min_interval_ms: int | None = None
    max_interval_ms: int | None = None
    run_policy: dict[str, Any] | None = RUN_POLICY


class EndpointIn(EndpointPatch):
    job_id: int  # type: ignore[assignment]
    name: str  # type: ignore[assignment]
    url: str  # type: ignore[assignment]


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
    failure_count: int
    last_run_at: datetime | None
    archived_at: datetime | None
    next_run_at: datetime | None
    next_run_source: str
    run_policy: dict[str, Any]

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
    until: datetime | None = Field(None, description="Pause until this time (UTC)…")
    for_ms: int | None = Field(None, description="…or for this many milliseconds.")
    reason: str = ""


class HintIn(Input):
    interval_ms: int | None = Field(None, description="A new cadence (at least 1000)…")
    next_run_at: datetime | None = Field(None, description="…or one run at this time.")
    ttl_ms: int = Field(description="How long the hint holds, in ms.")
    reason: str = ""


class ReasonIn(Input):
    reason: str = ""


# --- runs -------------------------------------------------------------------------------


class RunOut(Schema):
    id: int
    endpoint_id: int
    trigger: str
    source: str
    status: str
    scheduled_for: datetime
    started_at: datetime
    finished_at: datetime | None
    duration_ms: int | None
    status_code: int | None
    error: str
    attempt: int


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


class Dashboard(Schema):
    endpoints: int
    failing: int
    paused: int
    runs_last_24h: int
    failures_last_24h: int


class TenantOut(Schema):
    id: int
    name: str
    max_endpoints: int
    endpoints_used: int
    min_interval_ms: int
    monthly_token_budget: int
    tokens_used_this_month: int
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


class ChannelIn(Input):
    name: str = Field(description="Unique within the tenant.")
    kind: str = Field(description="email, webhook or apprise.")
    target: str = Field(
        description="Email: comma-separated addresses. Webhook: an http(s) URL (signed like "
        "endpoint requests). Chat/push: an Apprise URL (slack://…, ntfy://…). A secret: "
        "never shown again."
    )
    enabled: bool = True
    escalation_only: bool = Field(
        False, description="Receives only escalations of alert rules, not every alert."
    )
    tenant_id: int | None = Field(
        None, description="Needed only when the caller belongs to several tenants."
    )


class ChannelPatch(Input):
    name: str | None = None
    kind: str | None = None
    target: str | None = Field(None, description="Replaces the stored target.")
    enabled: bool | None = None
    escalation_only: bool | None = None


class ChannelOut(Schema):
    id: int
    tenant_id: int
    name: str
    kind: str
    target: str = Field(description="Always masked: the target carries the channel's tokens.")
    enabled: bool
    escalation_only: bool
    failing_since: datetime | None
    consecutive_failures: int
    created_at: datetime

    @staticmethod
    def resolve_target(channel: Any) -> str:
        return MASK


class DeliveryOut(Schema):
    id: int
    status: str
    attempts: int
    last_error: str
    sent_at: datetime | None


class AcknowledgementOut(Schema):
    endpoint_id: int
    failing: bool
    failing_since: datetime | None = Field(description="When its failing alert was raised.")
    acknowledged_at: datetime | None
    acknowledged_by: str = Field(description="Who acknowledged: no reminder or escalation since.")
