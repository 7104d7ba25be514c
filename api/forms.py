"""Writes through the same forms as the admin (``endpoints.forms``, ``notifications.forms``),
bound to the parsed values of the request, so the API validates exactly as the admin does:
the model's ``full_clean`` (with its field-level messages) plus the form's own checks (the
tenant's endpoint quota, masked secrets kept), scoped to the caller's tenants."""

from __future__ import annotations

from typing import Any

from django import forms
from django.forms.models import model_to_dict

from api.auth import Principal
from api.errors import InvalidInput
from endpoints.forms import JobForm
from endpoints.models import Endpoint, Job
from notifications.forms import AlertRuleForm, ChannelForm, MovableEndpointForm
from notifications.models import AlertRule, Channel


def validated_job(principal: Principal, job: Job, values: dict[str, Any]) -> Job:
    return _validated_in_tenant(JobForm, principal, job, values)


def validated_channel(principal: Principal, channel: Channel, values: dict[str, Any]) -> Channel:
    """The admin's channel form (its target kept unless replaced), the model's checks."""
    return _validated_in_tenant(ChannelForm, principal, channel, values)


def _validated_in_tenant(
    form_class: type[forms.ModelForm], principal: Principal, obj: Any, values: dict[str, Any]
) -> Any:
    """``obj`` with ``values`` over its stored fields, through ``form_class``, whose
    ``tenant`` may only be one of the caller's."""
    data = {**model_to_dict(obj, fields=form_class.Meta.fields), **values}  # type: ignore[attr-defined]
    form = form_class(data=data, instance=obj)
    form.fields["tenant"].queryset = principal.scope(  # type: ignore[attr-defined]
        form.fields["tenant"].queryset,  # type: ignore[attr-defined]
        "pk",
    )
    return _valid(form, renamed={"tenant": "tenant_id"})


def endpoint_form(principal: Principal, endpoint: Endpoint, values: dict[str, Any]) -> Any:
    """The endpoint form, bound to the stored values with ``values`` over them."""
    fields = MovableEndpointForm.Meta.fields
    # A new endpoint starts from the model's defaults, as the admin's add form does.
    data = {**model_to_dict(endpoint, fields=fields), **values}
    form = MovableEndpointForm(data=data, instance=endpoint)
    form.fields["job"].queryset = principal.scope(  # type: ignore[attr-defined]
        Job.objects.select_related("tenant"), "tenant"
    )
    _valid(form, renamed={"job": "job_id"})
    return form


def _valid(form: forms.ModelForm, *, renamed: dict[str, str]) -> Any:
    if not form.is_valid():
        errors = {
            renamed.get(field, field): [str(m) for m in messages]
            for field, messages in form.errors.items()
        }
        raise InvalidInput(errors)
    return form.instance


def validated_alert_rule(
    principal: Principal, rule: AlertRule, values: dict[str, Any]
) -> AlertRule:
    """The admin's alert rule form; the job or endpoint named is already the caller's."""
    defaults = {
        "enabled": True,
        "after_failures": AlertRule._meta.get_field("after_failures").default,
        "on_recovery": True,
        "on_pause": True,
        "stale_factor": 0,
        "quiet_from": None,
        "quiet_until": None,
        "remind_every_minutes": 0,
        "escalate_after_minutes": 0,
        "escalate_to": None,
    }
    form = AlertRuleForm(data={**defaults, **values}, instance=rule)
    form.fields["escalate_to"].queryset = principal.scope(  # type: ignore[attr-defined]
        Channel.objects.all(), "tenant"
    )
    form.fields["job"].queryset = principal.scope(  # type: ignore[attr-defined]
        Job.objects.all(), "tenant"
    )
    form.fields["endpoint"].queryset = principal.scope(  # type: ignore[attr-defined]
        Endpoint.objects.live(), "job__tenant"
    )
    renamed = {"job": "job_id", "endpoint": "endpoint_id", "escalate_to": "escalate_to_channel_id"}
    return _valid(form, renamed=renamed)  # type: ignore[no-any-return]
