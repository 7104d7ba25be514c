"""Writes through the admin's forms, so the API validates exactly as the admin does:
the model's ``full_clean`` (with its field-level messages) plus the form's own checks
(the tenant's endpoint quota, masked secret headers kept)."""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.forms.models import model_to_dict

from api.auth import Principal
from api.errors import InvalidInput
from endpoints.admin_forms import EndpointAdminForm
from endpoints.models import Endpoint, Job
from notifications.admin import ChannelForm
from notifications.models import Channel

JSON_FIELDS = ("headers", "secret_header_names", "body")


class JobForm(forms.ModelForm):
    class Meta:
        model = Job
        fields = ["tenant", "name", "description", "max_concurrent"]


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
    """The admin's endpoint form, bound to the stored values with ``values`` over them."""
    fields = EndpointAdminForm.Meta.fields
    # A new endpoint starts from the model's defaults, as the admin's add form does.
    data = {**model_to_dict(endpoint, fields=fields), **values}
    for name in JSON_FIELDS:
        if name in data:
            data[name] = json.dumps(data[name])
    form = EndpointAdminForm(data=data, instance=endpoint)
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
