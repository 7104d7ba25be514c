"""Forms behind the endpoint admin: ``5m``-style durations, masked secrets, quotas, pauses.

The model's ``full_clean`` stays the one source of validation messages; these forms only
translate what a person types (``90s``, a masked header) into model values and back.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django import forms
from django.conf import settings
from django.core.exceptions import ValidationError

from endpoints.models import Endpoint, HttpMethod, Job, Tenant
from endpoints.schedules import ScheduleError, format_interval, parse_interval
from endpoints.secrets import MASK, mask_headers, redact_url, replace_url_password, url_password
from endpoints.validation import json_text_depth_problem

SCHEDULE_FIELDS = frozenset(
    {"baseline_cron", "timezone", "baseline_interval_ms", "min_interval_ms", "max_interval_ms"}
)


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


class EndpointAdminForm(forms.ModelForm):
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
        fields = [
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
        ]
        field_classes = {
            "headers": BoundedJSONField,
            "secret_header_names": BoundedJSONField,
            "body": BoundedJSONField,
        }
        widgets = {
            "headers": forms.Textarea(attrs={"rows": 3, "cols": 70, "class": "cc-code"}),
            "secret_header_names": forms.Textarea(
                attrs={"rows": 1, "cols": 70, "class": "cc-code"}
            ),
            "body": forms.Textarea(attrs={"rows": 3, "cols": 70, "class": "cc-code"}),
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
            "url": "http:// or https:// URL. A password in it (https://user:pw@host) is a "
            "secret: it shows as a mask; leave the mask to keep it.",
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

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        job = cleaned.get("job")
        if job is not None and self.instance.pk is None:
            self._check_quota(job)
        return cleaned

    def _check_quota(self, job: Job) -> None:
        tenant = job.tenant
        used = Endpoint.objects.live().filter(job__tenant=tenant).count()
        if used >= tenant.max_endpoints:
            self.add_error(
                "job",
                f"{tenant.name} already has {used} of its {tenant.max_endpoints} endpoints; "
                "archive one or ask an administrator to raise the quota.",
            )

    def schedule_changed(self) -> bool:
        return bool(SCHEDULE_FIELDS.intersection(self.changed_data))


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
            "hmac_secret",
        ]

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if cleaned.get("clear_hmac_secret"):
            cleaned["hmac_secret"] = ""
        elif not cleaned.get("hmac_secret"):
            cleaned["hmac_secret"] = self.instance.hmac_secret
        return cleaned
