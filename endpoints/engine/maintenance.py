"""Safety nets: runs whose lease ran out become lost, old runs are pruned, signing
grace periods end. Called by the maintenance task and ``runscheduler``'s maintenance loop.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import (
    connection,
    transaction,
)

from endpoints.audit import prune_audit
from endpoints.engine import metrics, partitions
from endpoints.engine.claiming import (
    EXPIRED_RUN_ERROR,
    release_expired_portable,
    release_expired_postgresql,
)
from endpoints.engine.logs import log_event
from endpoints.engine.sql import fetch
from endpoints.models import (
    Heartbeat,
    Run,
    RunStatus,
    Tenant,
)
from endpoints.progress import Progress, Tally

PRUNE_BATCH_SIZE = 1_000


def sweep_zombies(*, now: datetime) -> int:
    """Runs still ``running`` past their lease become ``lost``; expired leases are released."""
    threshold = now - timedelta(seconds=settings.CRONICORN_ZOMBIE_THRESHOLD_SECONDS)
    lost = Run.objects.stale(now=threshold).update(
        status=RunStatus.LOST, finished_at=now, error=EXPIRED_RUN_ERROR
    )
    with transaction.atomic():
        if connection.vendor == "postgresql":
            release_expired_postgresql(now)
        else:
            release_expired_portable(now)
    metrics.record_zombies(lost)
    if lost:
        log_event(logging.WARNING, f"{lost} run(s) past their lease marked lost")
    Heartbeat.beat("maintenance", now=now, lost=lost)
    return lost


def retention_cycle(*, now: datetime) -> int:
    """One pass of the retention loop (the hourly prune task, ``runscheduler``'s
    maintenance loop): ``prune_runs`` and ``audit.prune_audit``, then the ``prune``
    heartbeat with how many runs it deleted. ``cleanup_runs`` calls ``prune_runs`` alone:
    its shifted ``now`` is no loop's time."""
    deleted = prune_runs(now=now)
    prune_audit(now=now)  # the audit trail and the scheduler's gaps, kept as long as runs
    Heartbeat.beat("prune", now=now, deleted=deleted)
    return deleted


def prune_runs(*, now: datetime, exact: bool = False, progress: Progress | None = None) -> int:
    """Delete runs older than the retention, always keeping each endpoint's latest runs
    (``CRONICORN_RUN_RETENTION_KEEP``) and every run still in flight.

    Deletes in bounded statements (about ``PRUNE_BATCH_SIZE`` rows each) so a large
    backlog never holds a long lock. On PostgreSQL the old runs go by ranges of
    ``started_at`` (set-based, no ids through Python); elsewhere through the ORM.

    On the partitioned history (PostgreSQL) this also creates the next weeks' partitions
    and drops the partitions entirely older than the cutoff whole (what they must keep
    moved out first); the runs of the partition that straddles the cutoff wait for its
    drop unless ``exact``: an hourly prune deleting them would delete every run row by
    row as it ages, an hour at a time, and leave nothing to drop. Those runs stay up to
    a week longer than the retention; ``cleanup_runs`` asks for ``exact``, and a
    ``progress`` told the runs deleted after each statement (stage "deleting").
    """
    tally = Tally(progress, "deleting")
    cutoff = now - timedelta(days=settings.CRONICORN_RUN_RETENTION_DAYS)
    keep = settings.CRONICORN_RUN_RETENTION_KEEP
    if connection.vendor != "postgresql":
        deleted = _prune_by_endpoint(cutoff, keep, tally=tally)
    elif partitions.partitioned():
        partitions.create_ahead(now=now)
        deleted = _prune_partitions(cutoff, keep, exact=exact, tally=tally)
    else:  # migration 0017 not applied yet (it rewrites the table: a maintenance window)
        floors = fetch(_PRUNE_FLOORS, [keep - 1, cutoff])
        deleted = _prune_postgresql(cutoff, keep, floors, tally=tally)
    if deleted:
        log_event(logging.INFO, f"pruned {deleted} run(s) that started before {cutoff:%Y-%m-%d}")
    return deleted


def _prune_by_endpoint(cutoff: datetime, keep: int, *, tally: Tally | None = None) -> int:
    tally = tally or Tally(None, "deleting")
    old = Run.objects.filter(started_at__lt=cutoff).exclude(status=RunStatus.RUNNING)
    deleted = 0
    for endpoint_id in old.values_list("endpoint_id", flat=True).distinct().order_by():
        kept = Run.objects.filter(endpoint_id=endpoint_id).order_by("-started_at", "-pk")
        keep_ids = list(kept.values_list("pk", flat=True)[:keep])
        candidates = old.filter(endpoint_id=endpoint_id).exclude(pk__in=keep_ids)
        while batch := list(candidates.values_list("pk", flat=True)[:PRUNE_BATCH_SIZE]):
            gone = Run.objects.filter(pk__in=batch).delete()[1].get("endpoints.Run", 0)
            deleted += gone
            tally.add(gone)
    return deleted


# The ``keep``-th newest run of each endpoint whose ``keep``-th newest run started before
# the cutoff, or that has fewer runs than that (NULL): only their old runs need the
# per-endpoint rule; every other endpoint's old runs all go. One probe of the history
# index per endpoint (``keep`` entries), so O(endpoints), not O(rows).
_PRUNE_FLOORS = """
SELECT e.id, k.started_at, k.id FROM endpoints_endpoint AS e
LEFT JOIN LATERAL (
    SELECT r.started_at, r.id FROM endpoints_run AS r WHERE r.endpoint_id = e.id
    ORDER BY r.started_at DESC, r.id DESC OFFSET %s LIMIT 1
) AS k ON true
WHERE k.started_at IS NULL OR k.started_at < %s
"""
# Every statement below leaves alone the runs due in [%s, %s): on the partitioned history
# the partition that straddles the cutoff, whose old runs go when it is dropped whole
# (the planner prunes it, so they are not even read); elsewhere an empty range.
_OUTSIDE = "(scheduled_for < %s OR scheduled_for >= %s)"
_PRUNE_FIRST = f"SELECT min(started_at) FROM endpoints_run WHERE {_OUTSIDE}"  # noqa: S608
# The start of the run ``PRUNE_BATCH_SIZE`` places after ``lo``: the end of a window.
_PRUNE_WINDOW_END = f"""
SELECT started_at FROM endpoints_run WHERE started_at >= %s AND {_OUTSIDE}
ORDER BY started_at OFFSET %s LIMIT 1
"""  # noqa: S608
# Deleted runs' retries keep their record, unlinked (``retry_of`` is SET_NULL, which
# Django emulates; the foreign key is checked at commit, after this statement).
_PRUNE_DELETE = """
WITH gone AS (
    DELETE FROM endpoints_run WHERE {where} AND status <> 'running' RETURNING id
), unlinked AS (
    UPDATE endpoints_run SET retry_of_id = NULL
    WHERE retry_of_id IN (SELECT id FROM gone) AND id NOT IN (SELECT id FROM gone)
)
SELECT count(*) FROM gone
"""
_PRUNE_RANGE = _PRUNE_DELETE.format(
    where="started_at >= %s AND started_at < %s AND endpoint_id <> ALL(%s::bigint[])"
    f" AND {_OUTSIDE}"
)
_PRUNE_ONE_ENDPOINT = _PRUNE_DELETE.format(
    where=f"endpoint_id = %s AND started_at < %s AND (started_at, id) < (%s, %s) AND {_OUTSIDE}"
)


def _prune_postgresql(
    cutoff: datetime,
    keep: int,
    floors: list[Any],
    spared: tuple[datetime, datetime] | None = None,
    *,
    tally: Tally | None = None,
) -> int:
    """Set-based retention: whole ranges of ``started_at`` (the ``endpoints_run_started``
    index) minus the few endpoints whose latest runs are old (``floors``), those one by
    one, leaving alone the runs due in ``spared``. Each statement commits on its own
    (autocommit)."""
    tally = tally or Tally(None, "deleting")
    special = [endpoint_id for endpoint_id, _at, _id in floors]
    outside = list(spared or (cutoff, cutoff))
    deleted = 0
    lo = fetch(_PRUNE_FIRST, outside)[0][0]
    while lo is not None and lo < cutoff:
        found = fetch(_PRUNE_WINDOW_END, [lo, *outside, PRUNE_BATCH_SIZE])
        hi = min(found[0][0], cutoff) if found else cutoff
        if hi <= lo:  # more than a batch started in the same microsecond
            hi = min(lo + timedelta(microseconds=1), cutoff)
        gone = fetch(_PRUNE_RANGE, [lo, hi, special, *outside], prepare=False)[0][0]
        deleted += gone
        tally.add(gone)
        lo = hi
    for endpoint_id, floor_at, floor_id in floors:
        if floor_at is not None:  # NULL: fewer runs than ``keep``, all kept
            one = [endpoint_id, cutoff, floor_at, floor_id, *outside]
            gone = fetch(_PRUNE_ONE_ENDPOINT, one)[0][0]
            deleted += gone
            tally.add(gone)
    return deleted


# How many runs a partition holds, and what it must keep before it is dropped (one
# snapshot): the complement of what the statements above delete (runs in flight, runs
# started at or after the cutoff, the latest runs of the endpoints in ``floors``), each
# found through an index. A run recorded in it later is kept by ``partitions.drop``.
_PARTITION_KEEPS = """
SELECT (SELECT count(*) FROM {p}), ARRAY(
SELECT id FROM {p} WHERE status = 'running'
UNION SELECT id FROM {p} WHERE started_at >= %s
UNION SELECT r.id FROM unnest(%s::bigint[], %s::timestamptz[], %s::bigint[]) AS f(e, at, id)
    JOIN LATERAL (
        SELECT id FROM {p} AS r WHERE r.endpoint_id = f.e
        AND (f.at IS NULL OR (r.started_at, r.id) >= (f.at, f.id))
    ) AS r ON true
)
"""
# Retries of the runs about to go lose their link first, as ``_PRUNE_DELETE`` does
# (the few retries, through endpoints_run_retries, each probing the partition's key).
_PARTITION_UNLINK = """
UPDATE endpoints_run AS r SET retry_of_id = NULL
WHERE r.retry_of_id IS NOT NULL AND r.retry_of_id <> ALL(%s::bigint[])
AND EXISTS (SELECT 1 FROM {p} AS o WHERE o.id = r.retry_of_id)
"""


def _prune_partitions(
    cutoff: datetime, keep: int, *, exact: bool, tally: Tally | None = None
) -> int:
    """Drop the partitions entirely before ``cutoff``, oldest first, keeping what the
    rules keep; then the set-based statements for the rest (the DEFAULT partition, runs
    started long after their slot, and when ``exact`` the partition that straddles the
    cutoff)."""
    tally = tally or Tally(None, "deleting")
    floors = fetch(_PRUNE_FLOORS, [keep - 1, cutoff])
    columns = [list(column) for column in zip(*floors, strict=True)] or [[], [], []]
    deleted = 0
    for start in partitions.older_than(cutoff):
        p = partitions.name_of(start)
        [(total, kept)] = fetch(_PARTITION_KEEPS.format(p=p), [cutoff, *columns], prepare=False)
        fetch(_PARTITION_UNLINK.format(p=p), [kept], prepare=False)
        if not partitions.drop(start, keep=kept, since=cutoff):
            return deleted  # the lock was busy: the rest waits for the next prune
        deleted += total - len(kept)
        tally.add(total - len(kept))
    # Only a partition that exists will be dropped: runs of that range held by DEFAULT go.
    straddling = partitions.start_of(cutoff)
    waits = not exact and straddling in partitions.starts()
    spared = (straddling, straddling + partitions.WIDTH) if waits else None
    return deleted + _prune_postgresql(cutoff, keep, floors, spared, tally=tally)


def end_signing_grace(*, now: datetime) -> int:
    """Drop the previous signing secrets whose grace period is over (maintenance)."""
    return Tenant.objects.filter(hmac_previous_until__lte=now).update(
        hmac_secret_previous="", hmac_previous_until=None
    )
