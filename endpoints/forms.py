"""The one validation path of endpoints and jobs for every interface that edits them.

The admin (``console.admin.forms`` adds text areas and help), the REST API and MCP bind
these forms to *parsed* values (a dict of headers, a JSON body as it is); underneath, the
model's ``full_clean`` (``endpoints.validation``) gives every message. The forms add what
only an edit knows: masked secrets left untouched keep the stored value, the tenant's
endpoint quota, which fields changed the schedule.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.core.exceptions import ValidationError

from endpoints.follow_ups import follow_up_problems, mentions_follow_ups
from endpoints.governor import REPLAN_FIELDS
from endpoints.models import Endpoint, HttpMethod, Job
from endpoints.schedules import ScheduleError, format_interval, parse_interval
from endpoints.secrets import MASK, mask_headers, redact_url, replace_url_password, url_password
from endpoints.validation import quota_problem

ENDPOINT_FIELDS = [
    "job",
    "name",
    "url",
    "method",
    "headers",
    "secret_header_names",
    "body",
    "timeout_ms",
    "max_response_size_kb",
    "baseline_cron",
    "timezone",
    "baseline_interval_ms",
    "min_interval_ms",
    "max_interval_ms",
    "description",
    "run_policy",
]

# What a run preview depends on: the schedule, the run policy (jitter, windows) and the
# job (its policy defaults, its tenant's minimum interval).
PREVIEW_FIELDS = ("job", *REPLAN_FIELDS)


class IntervalField(forms.CharField):
    """A duration typed as ``90s``, ``5m``, ``1h30m``, ``1d`` or plain ms; cleans to ms."""

    def __init__(self, *, example: str = "5m", **kwargs: Any) -> None:
        kwargs.setdefault("required", False)
        kwargs.setdefault("widget", forms.TextInput(attrs={"size": 12, "placeholder": example}))
        super().__init__(**kwargs)

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            return format_interval(value)
        return value

    def to_python(self, value: Any) -> int | None:  # type: ignore[override]
        text = super().to_python(value)
        if not text:
            return None
        try:
            return parse_interval(text)
        except ScheduleError as exc:
            raise ValidationError(str(exc), code="invalid") from None

    def has_changed(self, initial: Any, data: Any) -> bool:
        try:
            return self.to_python(data) != initial
        except ValidationError:
            return True


class ParsedJSONField(forms.JSONField):
    """A JSON value given already parsed (the API, MCP): taken as it is, never re-read
    from text, so a JSON string body stays a string."""

    def to_python(self, value: Any) -> Any:
        return value

    def bound_data(self, data: Any, initial: Any) -> Any:
        return data

    def has_changed(self, initial: Any, data: Any) -> bool:
        return bool(initial != data)


def none_is_no_policy(value: Any) -> Any:
    """An empty or null run policy means the defaults ({}); anything else is checked by
    the model (``endpoints.policies.policy_problems``)."""
    return {} if value is None or value == "" else value


class EndpointForm(forms.ModelForm):
    baseline_interval_ms = IntervalField(
        label="Interval",
        help_text="Run every … : 90s, 5m, 1h30m, 1d or milliseconds. Leave empty to use cron.",
    )
    min_interval_ms = IntervalField(
        label="Minimum interval",
        example="30s",
        help_text="Never run more often than this, whatever hints say. Empty: no bound.",
    )
    max_interval_ms = IntervalField(
        label="Maximum interval",
        example="1h",
        help_text="Never wait longer than this, whatever hints say. Empty: no bound.",
    )
    timeout_ms = IntervalField(
        label="Timeout",
        example="30s",
        required=True,
        initial=30_000,
        help_text="Total deadline for connect, headers and body (1s .. 30m).",
    )

    class Meta:
        model = Endpoint
        fields = ENDPOINT_FIELDS
        field_classes: dict[str, type[forms.Field]] = {
            "headers": ParsedJSONField,
            "secret_header_names": ParsedJSONField,
            "body": ParsedJSONField,
            "run_policy": ParsedJSONField,
        }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The methods read as they are sent (GET, not "Get").
        method: Any = self.fields["method"]
        method.choices = [(m, m) for m in HttpMethod.values]
        if self.instance.pk and isinstance(self.instance.headers, dict):
            self.initial["headers"] = mask_headers(
                self.instance.headers, tuple(self.instance.secret_header_names or ())
            )
        if self.instance.pk and isinstance(self.instance.url, str):
            self.initial["url"] = redact_url(self.instance.url)

    def clean_url(self) -> Any:
        """A URL password shows as the mask: left untouched, the stored one is kept."""
        url = self.cleaned_data.get("url")
        if not isinstance(url, str) or url_password(url) != MASK:
            return url
        stored = url_password(self.instance.url or "") if self.instance.pk else ""
        if not stored:
            raise ValidationError(
                f"The URL's password is the mask {MASK!r}, but no password is stored; "
                "type the real one."
            )
        return replace_url_password(url, stored)

    def clean_headers(self) -> Any:
        """Put stored secrets back where the person left the mask untouched."""
        headers = self.cleaned_data.get("headers")
        if not isinstance(headers, dict):
            return headers
        stored = self.instance.headers if isinstance(self.instance.headers, dict) else {}
        restored = dict(headers)
        for name, value in headers.items():
            if value != MASK:
                continue
            if name not in stored:
                raise ValidationError(
                    f"Header {name!r} holds the mask {MASK!r}, but no value is stored for it; "
                    "type the real value."
                )
            restored[name] = stored[name]
        return restored

    def clean_run_policy(self) -> Any:
        return none_is_no_policy(self.cleaned_data.get("run_policy"))

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        job = cleaned.get("job")
        # A new endpoint, or one moved into another tenant's job, takes a place in that
        # tenant's quota (save_endpoint checks again under a lock; this names the field).
        # The instance still holds the stored job here: the form assigns after clean().
        stored_tenant = self.instance.job.tenant_id if self.instance.job_id else None
        if job is not None and (self.instance.pk is None or job.tenant_id != stored_tenant):
            self._check_quota(job)
        self._check_follow_ups(cleaned)
        return cleaned

    def _check_follow_ups(self, cleaned: dict[str, Any]) -> None:
        """The follow-ups against the tenant (their names, and no cycle), with the values
        as they would be saved."""
        job, policy = cleaned.get("job"), cleaned.get("run_policy")
        if job is None or "run_policy" in self.errors or not isinstance(policy, dict):
            return
        if mentions_follow_ups(policy, job.run_policy) or {"name", "job"} & set(self.changed_data):
            edited = Endpoint(
                pk=self.instance.pk, job=job, name=cleaned.get("name", ""), run_policy=policy
            )
            for problem in follow_up_problems(job.tenant_id, endpoints=[edited]):
                self.add_error("run_policy", problem)

    def _check_quota(self, job: Job) -> None:
        used = Endpoint.objects.live().filter(job__tenant=job.tenant).count()
        if problem := quota_problem(job.tenant, live_after=used + 1):
            self.add_error("job", problem)

    def schedule_changed(self) -> bool:
        return bool(set(REPLAN_FIELDS).intersection(self.changed_data))

    def preview_problems(self) -> dict[str, list[str]]:
        """Validate (nothing is saved) and return the messages a save would show on the
        values a run preview depends on, by field; {} when ``self.instance`` now holds
        values the governor can plan (other fields, a name not typed yet, do not stop a
        preview). A job not chosen yet is no problem either: the preview is then planned
        without its policy defaults and its tenant's minimum interval."""
        self.is_valid()
        problems = {
            name: [str(message) for message in self.errors[name]]
            for name in PREVIEW_FIELDS
            if name in self.errors
        }
        if "job" in problems and "job" in self.fields and self["job"].data in (None, ""):
            del problems["job"]
        return problems


def check_job_follow_ups(form: forms.ModelForm, cleaned: dict[str, Any]) -> None:
    """A job form's follow-ups (its policy's, every endpoint's of it) against its tenant,
    with the values as they would be saved."""
    tenant, policy = cleaned.get("tenant"), cleaned.get("run_policy")
    if tenant is None or "run_policy" in form.errors or not isinstance(policy, dict):
        return
    if mentions_follow_ups(policy) or {"name", "tenant"} & set(form.changed_data):
        edited = Job(pk=form.instance.pk, tenant=tenant, name=cleaned.get("name", ""))
        edited.run_policy = policy
        for problem in follow_up_problems(tenant.pk, jobs=[edited]):
            form.add_error("run_policy", problem)


class JobForm(forms.ModelForm):
    class Meta:
        model = Job
        fields = ["tenant", "name", "description", "max_concurrent", "run_policy"]
        field_classes: dict[str, type[forms.Field]] = {"run_policy": ParsedJSONField}

    def clean_run_policy(self) -> Any:
        return none_is_no_policy(self.cleaned_data.get("run_policy"))

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        check_job_follow_ups(self, cleaned)
        return cleaned
