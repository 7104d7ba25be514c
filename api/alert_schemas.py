"""The API's shapes of alert channels, deliveries, acknowledgements and alert rules
(the rest are in ``api.schemas``, whose helpers these use)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ninja import Field, Schema
from pydantic import ConfigDict

from api.schemas import (
    CLOCK,
    POSITIVE_INT_MAX,
    Bool,
    ChannelKindName,
    ClockTime,
    Id,
    Input,
    Int,
    Name,
    optional,
)
from endpoints.secrets import MASK
from notifications.models import MINUTES_IN_A_YEAR

CHANNEL_TARGET = (
    "Email: comma-separated addresses. Webhook: an http(s) URL (signed like endpoint "
    "requests). Chat/push: an Apprise URL (slack://..., ntfy://...). A secret: never shown again."
)


class ChannelIn(Input):
    """A new alert channel."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [{"name": "oncall", "kind": "email", "target": "ops@example.com"}]
        },
    )

    name: Name = Field(description="Unique within the tenant.")
    kind: ChannelKindName = Field(description="email, webhook or apprise (chat and push).")
    target: str = Field(description=CHANNEL_TARGET, min_length=1)
    enabled: Bool = Field(True, description="Off: nothing is sent on it.")
    escalation_only: Bool = Field(
        False, description="Receives only escalations of alert rules, not every alert."
    )
    tenant_id: Id | None = Field(
        None, description="Needed only when the caller belongs to several tenants."
    )


class ChannelPatch(Input):
    """The fields to change; a target given replaces the stored one."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"enabled": False}]})

    name: Name = optional(description="Unique within the tenant.")
    kind: ChannelKindName = optional(description="email, webhook or apprise.")
    target: str = optional(
        description="Replaces the stored target. " + CHANNEL_TARGET, min_length=1
    )
    enabled: Bool = optional(description="Off: nothing is sent on it.")
    escalation_only: Bool = optional(
        description="Receives only escalations of alert rules, not every alert."
    )


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


# --- alert rules ----------------------------------------------------------------------


class AlertRuleIn(Input):
    """A job's rule (job_id) or an endpoint's override (endpoint_id); fields left out
    take their defaults."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [{"job_id": 1, "after_failures": 2, "stale_factor": 3}],
            "oneOf": [
                {"required": ["job_id"], "properties": {"job_id": {"type": "integer"}}},
                {"required": ["endpoint_id"], "properties": {"endpoint_id": {"type": "integer"}}},
            ],
        },
    )

    job_id: Id | None = Field(None, description="The job whose rule this is.")
    endpoint_id: Id | None = Field(
        None, description="Or: the endpoint this rule overrides its job's for."
    )
    enabled: Bool = Field(True, description="Off: it never alerts.")
    after_failures: Int = Field(
        3, description="Alert after this many failed runs in a row.", ge=1, le=POSITIVE_INT_MAX
    )
    on_recovery: Bool = Field(True, description="Alert when it succeeds again.")
    on_pause: Bool = Field(True, description="Alert when it is paused.")
    stale_factor: Int = Field(
        0,
        description="Alert when an interval endpoint has not run for this many times its "
        "interval (0: never).",
        ge=0,
        le=POSITIVE_INT_MAX,
    )
    quiet_from: ClockTime | None = Field(
        None, description="Quiet hours start (UTC, HH:MM); give both ends or neither."
    )
    quiet_until: ClockTime | None = Field(None, description="Quiet hours end (UTC, HH:MM).")
    remind_every_minutes: Int = Field(
        0,
        description="While failing and not acknowledged, remind every this many minutes "
        "(0: never; 60 or 1440 for hourly or daily).",
        ge=0,
        le=MINUTES_IN_A_YEAR,
    )
    escalate_after_minutes: Int = Field(
        0,
        description="Still failing and not acknowledged this long after the failing alert: "
        "tell escalate_to_channel_id, once (0: never).",
        ge=0,
        le=MINUTES_IN_A_YEAR,
    )
    escalate_to_channel_id: Id | None = Field(
        None, description="The channel escalations go to (one of the rule's tenant)."
    )


class AlertRuleOut(Schema):
    id: int
    job_id: int | None
    endpoint_id: int | None
    enabled: bool
    after_failures: int
    on_recovery: bool
    on_pause: bool
    stale_factor: int
    quiet_from: str | None = Field(
        description="Quiet hours start, UTC (HH:MM:SS).", json_schema_extra={"pattern": CLOCK}
    )
    quiet_until: str | None = Field(
        description="Quiet hours end, UTC (HH:MM:SS).", json_schema_extra={"pattern": CLOCK}
    )
    remind_every_minutes: int
    escalate_after_minutes: int
    escalate_to_channel_id: int | None = None

    @staticmethod
    def resolve_escalate_to_channel_id(rule: Any) -> int | None:
        return rule.escalate_to_id  # type: ignore[no-any-return]

    @staticmethod
    def resolve_quiet_from(rule: Any) -> str | None:
        return rule.quiet_from.isoformat() if rule.quiet_from else None

    @staticmethod
    def resolve_quiet_until(rule: Any) -> str | None:
        return rule.quiet_until.isoformat() if rule.quiet_until else None
