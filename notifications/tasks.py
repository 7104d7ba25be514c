"""Celery task of the notifications app (queue ``notify``, sent by beat every
``CRONICORN_NOTIFY_SECONDS``): thin over ``notifications.alerts.notify_cycle``."""

from __future__ import annotations

from celery import shared_task
from django.utils import timezone

from notifications.alerts import notify_cycle as run_notify_cycle

# Bounded: a cycle takes at most alerts.DELIVERY_BATCH messages and waits for their sends
# at most one notify period (each channel sends in its own thread of the worker process and
# records its own outcome); overlapping cycles are safe (every step is a conditional update).
CYCLE_TIME_LIMIT = 300


@shared_task(
    name="cronicorn.notify_cycle",
    ignore_result=True,
    soft_time_limit=CYCLE_TIME_LIMIT,
    time_limit=CYCLE_TIME_LIMIT + 30,
)
def notify_cycle() -> int:
    return run_notify_cycle(now=timezone.now()).alerts
