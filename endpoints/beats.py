"""Rows the engine writes beside its runs for other parts to read: ``Heartbeat`` (each
scheduler loop's last pass, for health checks and the dashboard) and ``Flip`` (a failure
streak a run ended, the alerts' outbox). Re-exported by ``endpoints.models``."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import models


class Heartbeat(models.Model):
    """The last time each scheduler loop (``health.LOOPS``: tick, zombie sweep, run
    retention, planner, alerts) did its work, and what it did (``info``: counts).

    One row per loop name, updated in place at the end of each pass, by the Celery task
    and by ``runscheduler`` alike; read by health checks, the dashboard and
    ``scheduler_status``. (The planner's cycle lease borrows a row, ``planner-cycle``.)
    """

    name = models.CharField(max_length=32, unique=True)
    at = models.DateTimeField()
    info = models.JSONField(default=dict, blank=True)

    def __str__(self) -> str:
        return f"{self.name} at {self.at:%Y-%m-%d %H:%M:%S}"

    @classmethod
    def beat(cls, name: str, *, now: datetime, **info: Any) -> None:
        updated = cls.objects.filter(name=name).update(at=now, info=info)
        if not updated:
            cls.objects.update_or_create(name=name, defaults={"at": now, "info": info})


class Flip(models.Model):
    """A failure streak a run ended: the outbox the notify cycle reads ("a streak of N
    failures ended at T"), written by the engine in the statement that records the run's
    reschedule, only for a success after failures, and deleted by the notify cycle that
    raises its alerts. Why the engine writes it: docs/DESIGN.md, "Alerts"."""

    endpoint = models.ForeignKey("endpoints.Endpoint", on_delete=models.CASCADE, related_name="+")
    failures = models.PositiveIntegerField(help_text="How many failed runs the streak had.")
    at = models.DateTimeField(help_text="When the run that ended the streak started.")

    class Meta:
        ordering = ["pk"]

    def __str__(self) -> str:
        return f"{self.failures} failures of {self.endpoint_id} ended at {self.at:%H:%M:%S}"
