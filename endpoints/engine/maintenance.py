"""Safety nets: runs whose lease ran out become lost, old runs are pruned, signing
grace periods end. Called by the maintenance task and ``runscheduler``'s maintenance loop.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.db import (
    connection,
    transaction,
)

from endpoints.engine import metrics
from endpoints.engine.claiming import release_expired_postgresql
from endpoints.engine.logs import log_event
from endpoints.models import (
    Heartbeat,
    Run,
    RunStatus,
    Slot,
    Tenant,
)

PRUNE_BATCH_SIZE = 1_000


def sweep_zombies(*, now: datetime) -> int:
    """Runs still ``running`` past their lease become ``lost``; expired leases are released."""
    threshold = now - timedelta(seconds=settings.CRONICORN_ZOMBIE_THRESHOLD_SECONDS)
    lost = Run.objects.stale(now=threshold).update(
        status=RunStatus.LOST,
        finished_at=now,
        error="Lost: its lease expired without being renewed (the worker died, stalled or "
        "lost the database before the run was recorded). The slot is retried.",
    )
    with transaction.atomic():
        if connection.vendor == "postgresql":
            release_expired_postgresql(now)
        else:
            Slot.objects.filter(claim_token__isnull=False, locked_until__lte=now).update(
                claim_token=None, locked_until=None
            )
    metrics.record_zombies(lost)
    if lost:
        log_event(logging.WARNING, f"{lost} run(s) past their lease marked lost")
    Heartbeat.beat("maintenance", now=now, lost=lost)
    return lost


def prune_runs(*, now: datetime) -> int:
    """Delete runs older than the retention, always keeping each endpoint's latest runs.

    Deletes in batches of ``PRUNE_BATCH_SIZE`` (each its own short statement) so a large
    backlog never holds a long lock.
    """
    cutoff = now - timedelta(days=settings.CRONICORN_RUN_RETENTION_DAYS)
    keep = settings.CRONICORN_RUN_RETENTION_KEEP
    old = Run.objects.filter(started_at__lt=cutoff).exclude(status=RunStatus.RUNNING)
    deleted = 0
    for endpoint_id in old.values_list("endpoint_id", flat=True).distinct().order_by():
        kept = Run.objects.filter(endpoint_id=endpoint_id).order_by("-started_at", "-pk")
        keep_ids = list(kept.values_list("pk", flat=True)[:keep])
        candidates = old.filter(endpoint_id=endpoint_id).exclude(pk__in=keep_ids)
        while batch := list(candidates.values_list("pk", flat=True)[:PRUNE_BATCH_SIZE]):
            deleted += Run.objects.filter(pk__in=batch).delete()[1].get("endpoints.Run", 0)
    if deleted:
        log_event(logging.INFO, f"pruned {deleted} run(s) older than {cutoff:%Y-%m-%d}")
    return deleted


def end_signing_grace(*, now: datetime) -> int:
    """Drop the previous signing secrets whose grace period is over (maintenance)."""
    return Tenant.objects.filter(hmac_previous_until__lte=now).update(
        hmac_secret_previous="", hmac_previous_until=None
    )
