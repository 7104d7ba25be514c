"""The renewal of the leases a live process holds: claims waiting for their time (or held
back by a host's limit or an overlap allowance) and runs in flight."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction

from endpoints.engine.claiming import Claim
from endpoints.models import Run, RunStatus, Slot

# Leases renewed per statement (SQLite allows a few thousand parameters).
RENEW_CHUNK = 500


def renew_leases(claims: Sequence[Claim], runs: Sequence[int], *, now: datetime) -> set[int]:
    """Extend the leases of claims a live process holds (waiting for their time, or with
    their run in flight) and of those runs, to ``now`` + the lease. Only leases that have
    not expired are renewed: an expired one may have passed to another claimer already.
    Returns the endpoint ids whose claims were renewed."""
    until = now + timedelta(seconds=settings.CRONICORN_LEASE_SECONDS)
    renewed: set[int] = set()
    for chunk in _chunks(claims, RENEW_CHUNK):
        # Tokens are unique, so matching both lists is matching the pairs. Rows locked by
        # a writer (a run being recorded: its lease is released anyway) are skipped, not
        # waited for: the writer locks endpoint then slot rows in its own order, and a
        # wait here could deadlock with it.
        mine = Slot.objects.filter(
            pk__in=[claim.endpoint_id for claim in chunk],
            claim_token__in=[claim.claim_token for claim in chunk],
            locked_until__gt=now,
        ).select_for_update(skip_locked=True)
        with transaction.atomic():
            ids = list(mine.values_list("pk", flat=True))
            Slot.objects.filter(pk__in=ids).update(locked_until=until)
        renewed.update(ids)
    for run_ids in _chunks(runs, RENEW_CHUNK):
        in_flight = Run.objects.filter(
            pk__in=run_ids, status=RunStatus.RUNNING, lease_expires_at__gt=now
        ).select_for_update(skip_locked=True)
        with transaction.atomic():
            Run.objects.filter(pk__in=in_flight.values("pk")).update(lease_expires_at=until)
    return renewed


def _chunks(items: Sequence[Any], size: int) -> Iterable[Sequence[Any]]:
    return (items[k : k + size] for k in range(0, len(items), size))
