"""Forms of the alert channels and rules: the one validation path of the admin, the API and
MCP (the model's ``full_clean`` underneath, as for endpoints)."""

from __future__ import annotations

from django import forms

from notifications.models import AlertRule, Channel


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
        fields = ["tenant", "name", "kind", "target", "enabled"]

    def clean_target(self) -> str:
        target = self.cleaned_data.get("target") or self.instance.target
        if not target:
            raise forms.ValidationError("Give the channel's address or URL.")
        return str(target)


class AlertRuleForm(forms.ModelForm):
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
        ]
        help_texts = {
            "job": "The job's rule applies to each of its endpoints…",
            "endpoint": "…unless the endpoint has a rule of its own. Pick one of the two.",
        }
