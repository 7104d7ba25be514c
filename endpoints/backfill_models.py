"""A backfill's rows: the request (``Backfill``) and its slots (``BackfillSlot``).

Kept out of ``endpoints.models`` (which imports them, so they are the app's models) for
its size. What a backfill does is ``endpoints.backfill`` and ``endpoints.engine.backfilling``.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from endpoints.choices import BackfillSlotState, BackfillStatus


class Backfill(models.Model):
    """The past slots of one endpoint, or of every endpoint of a job, in ``[range_from,
    range_to]``, to be run once each at ``rate`` runs a second; its slots are listed when
    it is created (``BackfillSlot``), so what it runs is fixed then."""

    endpoint = models.ForeignKey(
        "endpoints.Endpoint", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    job = models.ForeignKey(
        "endpoints.Job", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    range_from = models.DateTimeField()
    range_to = models.DateTimeField()
    rate = models.FloatField(help_text="Runs started per second, at most.")
    status = models.CharField(
        max_length=16, choices=BackfillStatus.choices, default=BackfillStatus.QUEUED
    )
    requested_by = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField()
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # The pacing: the next slot may start at this time; each slot taken moves it 1/rate on.
    paced_until = models.DateTimeField()
    total = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=BackfillStatus.values),
                name="endpoints_backfill_status_valid",
            ),
            models.CheckConstraint(
                condition=(Q(endpoint__isnull=True) & Q(job__isnull=False))
                | (Q(endpoint__isnull=False) & Q(job__isnull=True)),
                name="endpoints_backfill_endpoint_or_job",
            ),
            models.CheckConstraint(
                condition=Q(range_from__lt=models.F("range_to")),
                name="endpoints_backfill_range_ordered",
            ),
            models.CheckConstraint(
                condition=Q(rate__gt=0), name="endpoints_backfill_rate_positive"
            ),
        ]
        indexes = [
            # Used by the backfill loop: the few backfills still to run.
            models.Index(
                fields=["paced_until"],
                name="endpoints_backfill_active",
                condition=Q(status__in=["queued", "running"]),
            ),
        ]

    def __str__(self) -> str:
        return f"backfill {self.pk} ({self.status})"


class BackfillSlot(models.Model):
    """One slot of a backfill and what became of it (its run, or why it was not run)."""

    backfill = models.ForeignKey(Backfill, on_delete=models.CASCADE, related_name="slots")
    endpoint = models.ForeignKey("endpoints.Endpoint", on_delete=models.CASCADE, related_name="+")
    scheduled_for = models.DateTimeField()
    state = models.CharField(
        max_length=16, choices=BackfillSlotState.choices, default=BackfillSlotState.PENDING
    )
    # The run's id; no foreign key, as for ``Run.retry_of`` (the history is partitioned).
    run_id = models.BigIntegerField(null=True, blank=True)
    note = models.CharField(max_length=300, blank=True)

    class Meta:
        ordering = ["scheduled_for", "endpoint_id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(state__in=BackfillSlotState.values),
                name="endpoints_backfillslot_state_valid",
            ),
            models.UniqueConstraint(
                fields=["backfill", "endpoint", "scheduled_for"],
                name="endpoints_backfillslot_once",
            ),
        ]
        indexes = [
            # Used by the backfill loop's claim: a backfill's pending slots, earliest first.
            models.Index(
                fields=["backfill", "scheduled_for"],
                name="endpoints_backfillslot_pending",
                condition=Q(state="pending"),
            ),
        ]

    def __str__(self) -> str:
        return f"slot {self.scheduled_for:%Y-%m-%d %H:%M} of {self.backfill_id} ({self.state})"
