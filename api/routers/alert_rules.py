"""Alert rules (the notifications app): when a job's or an endpoint's alerts go out.
A rule on an endpoint overrides its job's; without any rule an endpoint alerts after 3
failed runs in a row, on recovery and when paused. Written through the admin's form."""

from __future__ import annotations

from typing import Any

from django.db.models import Q
from ninja import Router

from api.alert_schemas import AlertRuleIn, AlertRuleOut
from api.auth import NotFound, Principal
from api.errors import InvalidInput
from api.forms import validated_alert_rule
from api.operations import operation
from api.routers.endpoints import scoped_endpoint
from api.routers.jobs import scoped_job
from api.schemas import Message
from notifications.models import AlertRule

router = Router(tags=["alert rules"])


def rules_of(principal: Principal) -> Any:
    rules = AlertRule.objects.select_related("job", "endpoint__job")
    if principal.tenant_ids is None:
        return rules
    ids = list(principal.tenant_ids)
    return rules.filter(Q(job__tenant__in=ids) | Q(endpoint__job__tenant__in=ids))


@operation(router, "get", "/alert-rules", name="list_alert_rules", response=list[AlertRuleOut])
def list_alert_rules(principal: Principal) -> list[AlertRule]:
    """The alert rules of the caller's tenant(s): jobs' rules, then endpoints' overrides."""
    return list(rules_of(principal).order_by("endpoint_id", "job_id", "pk"))


@operation(
    router,
    "post",
    "/alert-rules",
    name="set_alert_rule",
    response=AlertRuleOut,
    repeatable=True,
)
def set_alert_rule(principal: Principal, payload: AlertRuleIn) -> AlertRule:
    """Set the alert rule of a job (job_id) or of one endpoint (endpoint_id), replacing
    the one it had: fields left out take their defaults."""
    if (payload.job_id is None) == (payload.endpoint_id is None):
        message = "Give exactly one of job_id (the job's rule) or endpoint_id (an override)."
        raise InvalidInput({"job_id": [message]})
    values = payload.dict(exclude={"job_id", "endpoint_id", "escalate_to_channel_id"})
    values["escalate_to"] = payload.escalate_to_channel_id
    if payload.job_id is not None:
        job = scoped_job(principal, payload.job_id)
        rule = AlertRule.objects.filter(job=job).first() or AlertRule()
        values.update(job=job.pk, endpoint=None)
    else:
        assert payload.endpoint_id is not None
        endpoint = scoped_endpoint(principal, payload.endpoint_id)
        rule = AlertRule.objects.filter(endpoint=endpoint).first() or AlertRule()
        values.update(endpoint=endpoint.pk, job=None)
    rule = validated_alert_rule(principal, rule, values)
    rule.save()
    return rule


@operation(
    router,
    "delete",
    "/alert-rules/{rule_id}",
    name="remove_alert_rule",
    response=Message,
)
def remove_alert_rule(principal: Principal, rule_id: int) -> Message:
    """Remove an alert rule: the job (or endpoint) falls back to its job's rule, or the
    defaults (alert after 3 failures, on recovery, on pause)."""
    rule = rules_of(principal).filter(pk=rule_id).first() if 1 <= rule_id < 2**63 else None
    if rule is None:
        raise NotFound("alert rule", rule_id)
    target = str(rule)
    rule.delete()
    return Message(detail=f"Removed the {target}.")
