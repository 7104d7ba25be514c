"""Analysis sessions: one row per planner run on one endpoint, kept even when it fails."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.db import models
from django.db.models import Case, F, Q, Sum, When
from django.db.models.functions import Greatest

from endpoints.models import Endpoint


class AnalysisSessionQuerySet(models.QuerySet["AnalysisSession"]):
    def for_user(self, user: Any) -> AnalysisSessionQuerySet:
        if user.is_superuser:
            return self
        return self.filter(endpoint__job__tenant__members=user)

    def this_month(self, now: datetime) -> AnalysisSessionQuerySet:
        """Sessions started this calendar month (UTC): the month of the token budget."""
        return self.filter(started_at__gte=budget_month_start(now))

    def tokens_committed(self, now: datetime) -> int:
        """The tokens these sessions count against a budget at ``now``: what each spent,
        or its reservation while that holds (a running session whose reservation has not
        expired), whichever is more."""
        holding = Q(status=SessionStatus.RUNNING, reserved_until__gt=now)
        charge = Case(
            When(holding, then=Greatest("total_tokens", "reserved_tokens")),
            default=F("total_tokens"),
        )
        return self.aggregate(total=Sum(charge))["total"] or 0


def budget_month_start(now: datetime) -> datetime:
    """The start of the calendar month (UTC) that a tenant's token budget covers."""
    return now.astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)


class Backend(models.TextChoices):
    RULES = "rules"
    LLM = "llm"


class SessionStatus(models.TextChoices):
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


class AnalysisSession(models.Model):
    Backend = Backend
    Status = SessionStatus

    endpoint = models.ForeignKey(
        Endpoint, on_delete=models.CASCADE, related_name="analysis_sessions"
    )
    backend = models.CharField(max_length=16, choices=Backend.choices)
    model = models.CharField(max_length=200, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.RUNNING)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    duration_ms = models.PositiveIntegerField(null=True, blank=True)
    tool_calls = models.JSONField(default=list, blank=True)
    reasoning = models.TextField(blank=True)
    actions_taken = models.JSONField(default=list, blank=True)
    confidence = models.FloatField(null=True, blank=True)
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    total_tokens = models.PositiveIntegerField(default=0)
    # An llm session's share of its tenant's monthly budget, taken before its first
    # request; it counts until the session finishes (then what it spent counts) or until
    # reserved_until (the analysis lease) passes, for a process that died mid-session.
    reserved_tokens = models.PositiveIntegerField(default=0)
    reserved_until = models.DateTimeField(null=True, blank=True)
    error = models.TextField(blank=True)
    note = models.TextField(blank=True, help_text="e.g. why an llm analysis fell back to rules.")
    failure_count_snapshot = models.PositiveIntegerField(default=0)
    next_analysis_at = models.DateTimeField(null=True, blank=True)

    objects = AnalysisSessionQuerySet.as_manager()

    class Meta:
        ordering = ["-started_at"]
        constraints = [
            models.CheckConstraint(
                condition=Q(backend__in=Backend.values),
                name="planner_analysissession_backend_valid",
            ),
            models.CheckConstraint(
                condition=Q(status__in=SessionStatus.values),
                name="planner_analysissession_status_valid",
            ),
            models.CheckConstraint(
                condition=Q(confidence__isnull=True)
                | (Q(confidence__gte=0) & Q(confidence__lte=1)),
                name="planner_analysissession_confidence_range",
            ),
        ]
        indexes = [
            # Used by the endpoint page and the planner prompt (last session's summary).
            models.Index(fields=["endpoint", "-started_at"], name="planner_session_history"),
            # Used by the dashboard and quota: tokens per tenant this month.
            models.Index(fields=["started_at"], name="planner_session_started"),
        ]

    def __str__(self) -> str:
        return f"{self.backend} analysis of {self.endpoint_id} at {self.started_at:%Y-%m-%d %H:%M}"
