"""Alerts: where they go (Channel), when they fire (AlertRule), what each endpoint last
told (AlertState), the state changes (Alert) and every send attempt (Delivery,
DeliveryAttempt). The workflows are in ``notifications/alerts.py``."""

from __future__ import annotations

from datetime import datetime, time
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, validate_email
from django.db import models, transaction
from django.db.models import Q

from endpoints.models import Endpoint, Job, Tenant
from endpoints.validation import line_problem

DEFAULT_AFTER_FAILURES = 3
# An endpoint is stale after at most this many times its interval (and its interval is
# at most a year): past that, "stale" would never be said.
MAX_STALE_FACTOR = 100
# The longest reminder period or escalation delay: a year is plenty (as for every duration).
MINUTES_IN_A_YEAR = 365 * 24 * 60
# Apprise URL parameters a tenant may not set, whatever the service: each makes the worker
# read a file on this server (keyfile, subfile, pgp*), fetch keys from a derived host
# (wkd), write files (store), or stretch a send past the notify deadline and our own
# retries (rto, cto, retry, wait).
REFUSED_APPRISE_PARAMS = {
    "keyfile": "reads a file on the server",
    "subfile": "reads a file on the server",
    "pgp": "encrypts with keys read from or written to the server's disk",
    "pgpkey": "reads a file on the server",
    "pgppub": "reads a file on the server",
    "pgpprv": "reads a file on the server",
    "wkd": "fetches keys from another host",
    "store": "writes files on the server",
    "rto": "changes the send deadline (CRONICORN_NOTIFY_TIMEOUT_SECONDS sets it)",
    "cto": "changes the send deadline (CRONICORN_NOTIFY_TIMEOUT_SECONDS sets it)",
    "retry": "repeats sends (the notify cycle retries failed sends itself)",
    "wait": "delays sends (the notify cycle retries failed sends itself)",
}


class ChannelKind(models.TextChoices):
    EMAIL = "email", "Email"
    WEBHOOK = "webhook", "Webhook (JSON, signed)"
    APPRISE = "apprise", "Chat or push (Apprise URL)"


class AlertKind(models.TextChoices):
    FAILING = "failing"
    RECOVERED = "recovered"
    PAUSED = "paused"
    STALE = "stale"
    REMINDER = "reminder"  # still failing, not acknowledged: the rule's remind_every
    ESCALATED = "escalated"  # still failing after the rule's escalate_after: to its channel


class DeliveryStatus(models.TextChoices):
    PENDING = "pending"
    SENT = "sent"
    # Gave up after the last attempt, or not sent: its channel was disabled, or every
    # endpoint it told of was archived or deleted (``delivery._withdraw``).
    FAILED = "failed"


class Channel(models.Model):
    """Where a tenant's alerts go. ``target`` is a secret: masked on every page, exported
    as a reference, never logged (an Apprise URL or a webhook URL carries tokens)."""

    Kind = ChannelKind

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="channels")
    name = models.CharField(max_length=200)
    kind = models.CharField(max_length=16, choices=ChannelKind.choices)
    target = models.CharField(
        max_length=2000,
        help_text="Email: comma-separated addresses. Webhook: an http(s) URL (requests are "
        "signed with the tenant's HMAC secret). Chat/push: an Apprise URL, e.g. "
        "slack://…, discord://…, tgram://…, ntfy://…, pagerduty://….",
    )
    enabled = models.BooleanField(default=True)
    escalation_only = models.BooleanField(
        default=False,
        help_text="Receives only escalations (a pager, an on-call lead), not every alert.",
    )
    # Marked failing after CRONICORN_NOTIFY_CHANNEL_FAILING_AFTER failed attempts in a row.
    consecutive_failures = models.PositiveIntegerField(default=0)
    failing_since = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["tenant__name", "name"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="notifications_channel_name"),
            models.CheckConstraint(
                condition=Q(kind__in=ChannelKind.values), name="notifications_channel_kind"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.tenant.name}/{self.name}"

    def clean(self) -> None:
        problems: dict[str, list[str]] = {}
        if message := line_problem(self.name):
            problems["name"] = [message]
        if self.kind in ChannelKind.values and self.target:
            try:
                validate_target(self.kind, self.target)
            except ValidationError as exc:
                problems["target"] = exc.messages
        if message := self.move_problem():
            problems["tenant"] = [message]
        elif message := self.channel_cap_problem():
            problems.setdefault("__all__", []).append(message)
        if problems:
            raise ValidationError(problems)

    def move_problem(self) -> str:
        """A channel that has told its tenant's alerts, or that a rule escalates to, stays
        in its tenant: moved, its deliveries (that tenant's alerts) would show in the other
        tenant, and the rules would escalate to another tenant's channel, reaching no one."""
        if self.pk is None or self.tenant_id is None:
            return ""
        stored = Channel.objects.filter(pk=self.pk).values_list("tenant_id", flat=True).first()
        if stored in (None, self.tenant_id):
            return ""
        if Delivery.objects.filter(channel_id=self.pk).exists() or (
            AlertRule.objects.filter(escalate_to_id=self.pk).exists()
        ):
            return (
                "This channel has sent its tenant's alerts (or a rule escalates to it), so it "
                "stays in its tenant. Add a channel with the same target to the other tenant "
                "instead."
            )
        return ""

    def channel_cap_problem(self) -> str:
        """The tenant's channel cap, for a new channel or one moved to another tenant.
        Inside a transaction (the admin's add view, the API's create, an import) the
        tenant's row is locked first, so concurrent creates are counted one at a time."""
        if self.tenant_id is None:
            return ""
        if transaction.get_connection().in_atomic_block:
            list(Tenant.objects.select_for_update().filter(pk=self.tenant_id).values("pk"))
        others = Channel.objects.filter(tenant_id=self.tenant_id).exclude(pk=self.pk)
        cap = settings.CRONICORN_MAX_CHANNELS_PER_TENANT
        if others.count() >= cap:
            return (
                f"This tenant has {cap} alert channels, the most allowed "
                "(CRONICORN_MAX_CHANNELS_PER_TENANT); delete one or add recipients to one."
            )
        return ""


def email_addresses(target: str) -> list[str]:
    return [part.strip() for part in target.split(",") if part.strip()]


def apprise_plugin(url: str) -> Any:
    """Apprise's service object for ``url``, or None if Apprise does not understand it.

    Apprise is imported here, not at the top: loading its ~100 services takes about a
    second, which every process (each worker, each manage.py command) would pay at start.
    """
    import apprise

    return apprise.Apprise.instantiate(url)


def apprise_schemes() -> set[str]:
    """Every scheme Apprise knows (allowed here or not)."""
    from apprise.manager_plugins import NotificationManager

    return {str(scheme).lower() for scheme in NotificationManager().schemas()}


def validate_target(kind: str, target: str) -> None:
    """Raise ``ValidationError`` with a message a person can act on."""
    if kind == ChannelKind.EMAIL:
        addresses = email_addresses(target)
        try:
            for address in addresses:
                validate_email(address)
        except ValidationError:
            addresses = []
        if not addresses:
            raise ValidationError(
                "Give one or more email addresses separated by commas, e.g. ops@example.com."
            )
        check_recipients(len(addresses))
    elif kind == ChannelKind.WEBHOOK:
        parts = urlsplit(target)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValidationError("Give an http:// or https:// URL for the webhook.")
    else:
        # The scheme and parameters first: instantiating some services reads their files.
        check_apprise_url(target)
        plugin = apprise_plugin(target)
        if plugin is None:
            raise ValidationError(NOT_UNDERSTOOD)
        check_recipients(apprise_recipients(plugin))


NOT_UNDERSTOOD = (
    "Apprise does not understand this URL. Examples: slack://TokenA/TokenB/TokenC, "
    "discord://WebhookID/Token, tgram://BotToken/ChatID, ntfy://topic."
)


def check_apprise_url(target: str) -> None:
    """One URL, of the allowed services (CRONICORN_APPRISE_SCHEMES), without the
    parameters that read files or bend the deadline (REFUSED_APPRISE_PARAMS). Run when
    the channel is saved and again before every send (a stored URL may predate a rule)."""
    from apprise.utils.parse import parse_urls  # lazily: see apprise_plugin

    scheme = target.partition("://")[0].strip().lower() if "://" in target else ""
    allowed = [s.lower() for s in settings.CRONICORN_APPRISE_SCHEMES]
    if scheme not in allowed:
        if scheme not in apprise_schemes():
            raise ValidationError(NOT_UNDERSTOOD)
        raise ValidationError(
            f"Apprise service {scheme + '://' if scheme else '(none)'} is not allowed here; "
            f"use one of: {', '.join(s + '://' for s in allowed)} "
            "(the operator sets CRONICORN_APPRISE_SCHEMES)."
        )
    # Apprise sends to every URL it finds (split at commas and spaces before a scheme):
    # the checks here read the first, so a second would escape them.
    if (count := len(parse_urls(target))) > 1:
        raise ValidationError(
            f"Give one Apprise URL per channel: Apprise reads this target as {count} URLs "
            "(separated by commas or spaces); make a channel for each."
        )
    for name in _parameter_names(target):
        if why := REFUSED_APPRISE_PARAMS.get(name):
            raise ValidationError(f"Remove the '{name}=' parameter: it {why}.")


def _parameter_names(target: str) -> list[str]:
    """The URL's parameter names as Apprise reads them (a query after a fragment too:
    ``…/#channel?rto=…``), and as a plain URL parser does, lowercased."""
    from apprise.utils.parse import parse_url  # lazily: see apprise_plugin

    query = urlsplit(target).query if "?" in target else ""
    names = [name for name, _value in parse_qsl(query, keep_blank_values=True)]
    names += (parse_url(target, verify_host=False) or {}).get("qsd", {})
    return [name.strip().lower() for name in names]


def apprise_recipients(plugin: Any) -> int:
    """How many addresses one send reaches (an email plugin's cc and bcc included)."""
    try:
        count = len(plugin)
    except TypeError:
        count = 1
    for extra in ("cc", "bcc"):
        count += len(getattr(plugin, extra, None) or ())
    return count


def check_recipients(count: int) -> None:
    cap = settings.CRONICORN_MAX_RECIPIENTS_PER_CHANNEL
    if count > cap:
        raise ValidationError(
            f"This channel names {count} recipients; at most {cap} are allowed "
            "(CRONICORN_MAX_RECIPIENTS_PER_CHANNEL). Use a mailing list or several channels."
        )


class AlertRule(models.Model):
    """When a job's endpoints alert; a rule on one endpoint overrides its job's rule.
    Without any rule an endpoint alerts after 3 failures, on recovery and on pause."""

    job = models.OneToOneField(
        Job, on_delete=models.CASCADE, null=True, blank=True, related_name="alert_rule"
    )
    endpoint = models.OneToOneField(
        Endpoint, on_delete=models.CASCADE, null=True, blank=True, related_name="alert_rule"
    )
    enabled = models.BooleanField(default=True, help_text="Off: this job/endpoint never alerts.")
    after_failures = models.PositiveIntegerField(
        default=DEFAULT_AFTER_FAILURES, help_text="Alert after this many failed runs in a row."
    )
    on_recovery = models.BooleanField(default=True, help_text="Alert when it succeeds again.")
    on_pause = models.BooleanField(default=True, help_text="Alert when it is paused.")
    stale_factor = models.PositiveIntegerField(
        default=0,
        help_text="Alert when it has not run for this many times its interval (0: never).",
    )
    quiet_from = models.TimeField(null=True, blank=True, help_text="Quiet hours start (UTC).")
    quiet_until = models.TimeField(null=True, blank=True, help_text="Quiet hours end (UTC).")
    # Off by default: the failing alert already went to every channel, and a reminder
    # nobody asked for on a long-known outage trains people to ignore alerts.
    remind_every_minutes = models.PositiveIntegerField(
        default=0,
        validators=[MaxValueValidator(MINUTES_IN_A_YEAR)],
        help_text="While failing and not acknowledged, remind every this many minutes "
        "(0: never; 60 or 1440 for hourly or daily).",
    )
    escalate_after_minutes = models.PositiveIntegerField(
        default=0,
        validators=[MaxValueValidator(MINUTES_IN_A_YEAR)],
        help_text="Still failing and not acknowledged this many minutes after the failing "
        "alert: tell the escalation channel, once (0: never).",
    )
    escalate_to = models.ForeignKey(
        Channel,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        help_text="Where escalations go (a channel of the same tenant).",
    )

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=(Q(job__isnull=False) & Q(endpoint__isnull=True))
                | (Q(job__isnull=True) & Q(endpoint__isnull=False)),
                name="notifications_alertrule_job_xor_endpoint",
            ),
            models.CheckConstraint(
                condition=Q(after_failures__gte=1), name="notifications_alertrule_after_failures"
            ),
            models.CheckConstraint(
                condition=(Q(quiet_from__isnull=True) & Q(quiet_until__isnull=True))
                | (Q(quiet_from__isnull=False) & Q(quiet_until__isnull=False)),
                name="notifications_alertrule_quiet_hours_both",
            ),
        ]

    def __str__(self) -> str:
        return f"alerts for {self.endpoint or self.job}"

    def clean(self) -> None:
        if isinstance(self.stale_factor, int) and self.stale_factor > MAX_STALE_FACTOR:
            raise ValidationError(
                {"stale_factor": f"At most {MAX_STALE_FACTOR} times the interval (0: never)."}
            )
        # Mirrors notifications_alertrule_job_xor_endpoint with a message for the form.
        if (self.job_id is None) == (self.endpoint_id is None):
            raise ValidationError(
                "Pick the job the rule is for, or one endpoint whose rule overrides its "
                "job's; not both, not neither."
            )
        if self.escalate_after_minutes and self.escalate_to_id is None:
            raise ValidationError(
                {"escalate_to": "Pick the channel escalations go to, or set escalate after to 0."}
            )
        channel_tenant = (
            Channel.objects.filter(pk=self.escalate_to_id or 0)
            .values_list("tenant_id", flat=True)
            .first()
        )
        if self.escalate_to_id is not None and self._tenant_id() not in (None, channel_tenant):
            raise ValidationError(
                {"escalate_to": "Pick a channel of the tenant this rule's job belongs to."}
            )

    def _tenant_id(self) -> int | None:
        if self.job_id is not None:
            return Job.objects.filter(pk=self.job_id).values_list("tenant_id", flat=True).first()
        return (
            Endpoint.objects.filter(pk=self.endpoint_id or 0)
            .values_list("job__tenant_id", flat=True)
            .first()
        )

    def is_quiet(self, now: datetime) -> bool:
        if self.quiet_from is None or self.quiet_until is None:
            return False
        return _within(now.time(), self.quiet_from, self.quiet_until)


def escalation_move_problem(
    tenant_id: int, *, job_id: int | None = None, endpoint_id: int | None = None
) -> str:
    """Why a job (its rule and its endpoints' rules) or one endpoint (its rule) cannot move
    to the tenant ``tenant_id``, or "": a rule escalating to a channel of its tenant would
    escalate to another tenant's channel there, which no escalation reaches (and which
    the new tenant would see). Every interface that moves one asks this first."""
    rules = AlertRule.objects.filter(escalate_to__isnull=False).exclude(
        escalate_to__tenant_id=tenant_id
    )
    if job_id is not None:
        rules = rules.filter(Q(job_id=job_id) | Q(endpoint__job_id=job_id))
    else:
        rules = rules.filter(endpoint_id=endpoint_id or 0)
    rule = rules.select_related("escalate_to", "job", "endpoint__job").order_by("pk").first()
    if rule is None:
        return ""
    assert rule.escalate_to is not None
    return (
        f"The alert rule of {rule.endpoint or rule.job} escalates to {rule.escalate_to.name}, "
        "a channel of the current tenant, which the new tenant cannot use: pick one of the "
        "new tenant's channels (or none) as the rule's escalation channel, then move it."
    )


def _within(at: time, start: time, end: time) -> bool:
    # Quiet hours may span midnight (22:00-07:00).
    return start <= at < end if start <= end else at >= start or at < end


class AlertState(models.Model):
    """What alerts last said about an endpoint; the notify cycle compares it with the
    endpoint and raises an Alert on each change, never one per run."""

    endpoint = models.OneToOneField(
        Endpoint, on_delete=models.CASCADE, primary_key=True, related_name="alert_state"
    )
    failing = models.BooleanField(default=False)
    stale = models.BooleanField(default=False)
    paused_until_seen = models.DateTimeField(null=True, blank=True)
    changed_at = models.DateTimeField(null=True, blank=True)
    # The failing episode: when its failing alert was raised, its last reminder, its
    # escalation and who acknowledged it (which stops both). Cleared on recovery.
    failing_since = models.DateTimeField(null=True, blank=True)
    reminded_at = models.DateTimeField(null=True, blank=True)
    escalated_at = models.DateTimeField(null=True, blank=True)
    # When the breaker's opening was told (a failing episode of its own, if none was
    # open): the failed probes that re-open it are not told again. Cleared on recovery.
    breaker_told_at = models.DateTimeField(null=True, blank=True)
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    acknowledged_by = models.CharField(max_length=200, blank=True)
    # The tenant whose alerts this state told (its endpoint's): an endpoint moved to another
    # tenant starts over there, all clear (``alerts._states_of``). Null in a state kept
    # from before it was recorded: taken as the endpoint's tenant at the next cycle.
    tenant = models.ForeignKey(
        Tenant, on_delete=models.CASCADE, null=True, blank=True, related_name="+"
    )

    class Meta:
        indexes = [
            # Used by the notify cycle: endpoints whose alert is still open.
            models.Index(
                fields=["endpoint"],
                name="notifications_state_open",
                condition=Q(failing=True) | Q(stale=True) | Q(paused_until_seen__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return f"alert state of {self.endpoint_id}"


class Alert(models.Model):
    """One state change of one endpoint. Alerts of a job that change together are sent
    as one digest: ``queued_at`` is set when its Deliveries are made."""

    Kind = AlertKind

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="+")
    endpoint = models.ForeignKey(Endpoint, on_delete=models.CASCADE, related_name="alerts")
    kind = models.CharField(max_length=16, choices=AlertKind.choices)
    detail = models.TextField(blank=True)
    # Set for an escalation: it goes to this channel only, not to the tenant's channels.
    channel = models.ForeignKey(
        Channel, on_delete=models.CASCADE, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField()
    queued_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(
                condition=Q(kind__in=AlertKind.values), name="notifications_alert_kind"
            ),
        ]
        indexes = [
            # Used by the notify cycle: alerts not yet turned into deliveries.
            models.Index(
                fields=["job", "created_at"],
                name="notifications_alert_unqueued",
                condition=Q(queued_at__isnull=True),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind}: {self.endpoint}"


class Delivery(models.Model):
    """One message to one channel: a single alert or a digest of a job's alerts."""

    channel = models.ForeignKey(Channel, on_delete=models.CASCADE, related_name="deliveries")
    alerts = models.ManyToManyField(Alert, related_name="deliveries")
    subject = models.CharField(max_length=300)
    body = models.TextField()
    payload = models.JSONField(help_text="The webhook's JSON.")
    status = models.CharField(
        max_length=16, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING
    )
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField()
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField()
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name_plural = "deliveries"
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=DeliveryStatus.values), name="notifications_delivery_status"
            ),
        ]
        indexes = [
            # Used by the send step: deliveries due for an attempt.
            models.Index(
                fields=["next_attempt_at"],
                name="notifications_delivery_due",
                condition=Q(status="pending"),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.subject} → {self.channel}"


class DeliveryAttempt(models.Model):
    delivery = models.ForeignKey(Delivery, on_delete=models.CASCADE, related_name="attempt_log")
    number = models.PositiveIntegerField()
    at = models.DateTimeField()
    ok = models.BooleanField()
    duration_ms = models.PositiveIntegerField()
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["delivery", "number"]
        constraints = [
            models.UniqueConstraint(
                fields=["delivery", "number"], name="notifications_attempt_number"
            ),
        ]

    def __str__(self) -> str:
        return f"attempt {self.number} of {self.delivery_id}: {'ok' if self.ok else 'failed'}"
