"""Forms of the admin pages: the endpoint and job forms typed by a person (JSON in text
areas, with field editors over them: ``console.admin.policy_widgets``), the pause-until
step and the tenant form with its write-only HMAC secret.

Validation is ``endpoints.forms`` and the model's ``full_clean``; these forms only
translate what a person types into model values and back.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django import forms
from django.conf import settings
from django.core.exceptions import ValidationError

from console.admin.policy_widgets import (
    HeadersWidget,
    JSONBodyWidget,
    RunPolicyWidget,
    policy_words,
)
from endpoints.models import Tenant
from endpoints.policies import stored_policy
from endpoints.validation import json_text_depth_problem
from notifications.forms import MovableEndpointForm, MovableJobForm


class BoundedJSONField(forms.JSONField):
    """Django's JSON form field, refusing text nested deeper than
    ``CRONICORN_MAX_JSON_DEPTH`` before parsing it: Python's parser recurses, and a few
    thousand brackets would end the request in a RecursionError."""

    def to_python(self, value: Any) -> Any:
        if isinstance(value, str) and (problem := self._depth_problem(value)):
            raise ValidationError(f"This JSON {problem}.", code="invalid")
        return super().to_python(value)

    def bound_data(self, data: Any, initial: Any) -> Any:
        if isinstance(data, str) and self._depth_problem(data):
            return forms.fields.InvalidJSONInput(data)
        return super().bound_data(data, initial)

    @staticmethod
    def _depth_problem(text: str) -> str:
        return json_text_depth_problem(text, max_depth=settings.CRONICORN_MAX_JSON_DEPTH)


RUN_POLICY_HELP = (
    'A JSON object, e.g. {"retry_attempts": 3, "body_json_path": "status", '
    '"body_json_equals": "ok", "breaker_failed_slots": 5, "catchup_window_ms": 3600000, '
    '"jitter_ms": 30000, "holidays": {"country": "DE", "subdivision": "BY"}, '
    '"exclude_dates": ["2026-12-24..2026-12-26"]}; {} keeps the defaults (see the README, '
    '"Run policies").'
)


def show_policy_in_effect(form: forms.ModelForm, lines: list[str], where: str) -> None:
    """Above the run policy's fields, what the saved one does (its widget is the form's own
    copy, so this is for this page only)."""
    widget: Any = form.fields["run_policy"].widget
    widget.in_effect, widget.in_effect_label = tuple(lines), where


class EndpointAdminForm(MovableEndpointForm):
    """``EndpointForm`` typed by a person: JSON in text areas, help beside each field."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            words = policy_words(self.instance.policy, self.instance.timezone)
            show_policy_in_effect(self, words, "with the job's defaults")

    class Meta(MovableEndpointForm.Meta):
        field_classes = {
            "headers": BoundedJSONField,
            "secret_header_names": BoundedJSONField,
            "body": BoundedJSONField,
            "run_policy": BoundedJSONField,
        }
        widgets = {
            "run_policy": RunPolicyWidget(under="the job's"),
            "headers": HeadersWidget(),
            "secret_header_names": forms.Textarea(
                attrs={"rows": 1, "cols": 70, "class": "cc-code"}
            ),
            "body": JSONBodyWidget(),
        }
        labels = {
            "baseline_cron": "Cron",
            "url": "URL",
            "max_response_size_kb": "Response size cap (KB)",
        }
        help_texts = {
            "secret_header_names": 'A JSON list, e.g. ["X-Partner"]. Names containing '
            "authorization, cookie, token, secret, key, password or signature are masked "
            "anyway.",
            "body": "JSON sent with POST, PUT and PATCH; null for none.",
            "baseline_cron": "5 fields (minute hour day month weekday) or @hourly, @daily… "
            "Leave empty to use an interval.",
            "timezone": "IANA name the cron is read in, e.g. Europe/Berlin.",
            "headers": 'A JSON object, e.g. {"Authorization": "Bearer …"}. Secret values '
            "show as a mask: leave the mask to keep the stored value.",
            "run_policy": RUN_POLICY_HELP + " Keys given here override the job's.",
            "url": "http:// or https:// URL. A password in it (https://user:pw@host) is a "
            "secret: it shows as a mask; leave the mask to keep it.",
        }


class JobAdminForm(MovableJobForm):
    """The job page: its run policy (the defaults of its endpoints) with fields."""

    class Meta(MovableJobForm.Meta):
        field_classes = {"run_policy": BoundedJSONField}
        widgets = {"run_policy": RunPolicyWidget()}
        help_texts = {"run_policy": RUN_POLICY_HELP + " Its endpoints may override each key."}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            words = policy_words(stored_policy(self.instance.run_policy, {}))
            show_policy_in_effect(self, words, "for its endpoints, unless one overrides a key")


class PauseUntilForm(forms.Form):
    """The 'pause until a time' choice, on the change page and the list's action step."""

    until = forms.DateTimeField(
        label="Pause until",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
        input_formats=["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M"],
        help_text="In UTC.",
    )
    reason = forms.CharField(required=False, max_length=500)

    def __init__(self, *args: Any, now: datetime, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.now = now

    def clean_until(self) -> datetime:
        until: datetime = self.cleaned_data["until"]
        if until <= self.now:
            raise ValidationError(
                "That time has already passed; pick a time in the future (UTC), or use Resume."
            )
        return until


class TenantAdminForm(forms.ModelForm):
    """The HMAC secret is write-only: never shown back, kept unless replaced or cleared."""

    hmac_secret = forms.CharField(
        required=False,
        label="HMAC secret",
        widget=forms.PasswordInput(render_value=False),
        help_text="Type a new secret to replace the stored one; leave empty to keep it.",
    )
    clear_hmac_secret = forms.BooleanField(
        required=False, label="Remove the secret (requests are no longer signed)"
    )

    class Meta:
        model = Tenant
        fields = [
            "name",
            "members",
            "max_endpoints",
            "min_interval_ms",
            "monthly_token_budget",
            "host_rate_limits",
            "hmac_secret",
        ]

    def clean_host_rate_limits(self) -> Any:
        # An emptied box means no limits, as {} does (the model's validation says the rest).
        value = self.cleaned_data.get("host_rate_limits")
        return {} if value in (None, "") else value

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if cleaned.get("clear_hmac_secret"):
            cleaned["hmac_secret"] = ""
        elif not cleaned.get("hmac_secret"):
            cleaned["hmac_secret"] = self.instance.hmac_secret
        return cleaned
