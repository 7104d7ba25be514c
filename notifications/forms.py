"""Forms of the alert channels and rules: the one validation path of the admin, the API and
MCP (the model's ``full_clean`` underneath, as for endpoints)."""

from __future__ import annotations

from typing import Any

from django import forms

from endpoints.forms import EndpointForm, check_job_follow_ups
from endpoints.models import Job
from notifications.models import (
    MINUTES_IN_A_YEAR,
    AlertRule,
    Channel,
    escalation_move_problem,
)


class ChannelForm(forms.ModelForm):
    """The target holds the channel's secrets: write-only, kept unless replaced."""

    target = forms.CharField(
        required=False,
        max_length=2000,
        widget=forms.PasswordInput(render_value=False, attrs={"size": 80}),
        help_text=Channel._meta.get_field("target").help_text
        + " Stored as a secret: type it again to replace it, leave empty to keep it.",
    )

    class Meta:
        model = Channel
        fields = ["tenant", "name", "kind", "target", "enabled", "escalation_only"]

    def clean_target(self) -> str:
        target = self.cleaned_data.get("target") or self.instance.target
        if not target:
            raise forms.ValidationError("Give the channel's address or URL.")
        return str(target)


class AlertRuleForm(forms.ModelForm):
    # Optional, 0 when left out: a rule written before reminders existed stays valid.
    remind_every_minutes = forms.IntegerField(
        min_value=0,
        max_value=MINUTES_IN_A_YEAR,
        required=False,
        help_text=AlertRule._meta.get_field("remind_every_minutes").help_text,
    )
    escalate_after_minutes = forms.IntegerField(
        min_value=0,
        max_value=MINUTES_IN_A_YEAR,
        required=False,
        help_text=AlertRule._meta.get_field("escalate_after_minutes").help_text,
    )

    def clean_remind_every_minutes(self) -> int:
        return int(self.cleaned_data.get("remind_every_minutes") or 0)

    def clean_escalate_after_minutes(self) -> int:
        return int(self.cleaned_data.get("escalate_after_minutes") or 0)

    class Meta:
        model = AlertRule
        fields = [
            "job",
            "endpoint",
            "enabled",
            "after_failures",
            "on_recovery",
            "on_pause",
            "stale_factor",
            "quiet_from",
            "quiet_until",
            "remind_every_minutes",
            "escalate_after_minutes",
            "escalate_to",
        ]
        help_texts = {
            "job": "The job's rule applies to each of its endpoints…",
            "endpoint": "…unless the endpoint has a rule of its own. Pick one of the two.",
        }


class MovableEndpointForm(EndpointForm):
    """``EndpointForm`` for the interfaces that can move an endpoint to another tenant's
    job (the admin, the API and MCP for a person in several tenants): its alert rule must
    not escalate to a channel of the tenant it leaves (``escalation_move_problem``)."""

    def clean(self) -> dict[str, Any]:
        # The instance still holds the stored job here: the form assigns after clean().
        cleaned = super().clean()
        job = cleaned.get("job")
        if self.instance.pk is None or job is None:
            return cleaned
        if job.tenant_id != self.instance.job.tenant_id:
            _refuse_move(self, "job", job.tenant_id, endpoint_id=self.instance.pk)
        return cleaned


class MovableJobForm(forms.ModelForm):
    """The admin's job page, where a job moves to another tenant (the API and imports
    keep a job in its tenant): its rules must not escalate to a channel of the tenant it
    leaves (``escalation_move_problem``)."""

    class Meta:
        model = Job
        fields = ["tenant", "name", "description", "status", "max_concurrent", "run_policy"]

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        check_job_follow_ups(self, cleaned)
        tenant = cleaned.get("tenant")
        if self.instance.pk is None or tenant is None:
            return cleaned
        if tenant.pk != self.instance.tenant_id:
            _refuse_move(self, "tenant", tenant.pk, job_id=self.instance.pk)
        return cleaned


def _refuse_move(form: forms.ModelForm, field: str, tenant_id: int, **moving: Any) -> None:
    if problem := escalation_move_problem(tenant_id, **moving):
        form.add_error(field, problem)
