"""The claim: which endpoints are due, taken atomically, each with a token and a lease.

DESIGN.md "Life of a run", step 1. ``claim_due_endpoints`` takes due slots in one short
transaction (``FOR UPDATE SKIP LOCKED`` on PostgreSQL, an immediate transaction on SQLite)
and gives each a fresh claim token and a short lease; ``tick`` repeats it until nothing
due is left and hands each batch to a dispatcher once committed.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypedDict

from django.conf import settings
from django.db import (
    connection,
    transaction,
)
from django.db.models import Count
from django.utils import timezone

from endpoints.audit import note_tick
from endpoints.engine import metrics, sql
from endpoints.engine.logs import log_event, logger
from endpoints.models import (
    Heartbeat,
    Job,
    JobStatus,
    Run,
    RunStatus,
    RunTrigger,
    Slot,
    Source,
)


class ClaimPayload(TypedDict):
    """A claim as a Celery message carries it (JSON): the wire format, unchanged."""

    endpoint_id: int
    claim_token: str
    scheduled_for: str
    source: str
    trigger: str
    start_at: str | None


@dataclass(frozen=True)
class Reservation:
    """A start that a host's rate limit reserved for a claim (``host_limits``)."""

    key: str  # tenant and host
    at: float  # the start reserved, epoch seconds
    generation: int  # the budget's generation then: a pause voids older reservations
    since: datetime  # when the run would have started without the limit
    paused: float = 0.0  # the end of the budget's last pause (a 429) when reserved


@dataclass(frozen=True)
class Claim:
    endpoint_id: int
    claim_token: uuid.UUID
    scheduled_for: datetime  # the slot (the Run's scheduled_for)
    source: str
    trigger: str
    start_at: datetime | None = None  # a catch-up's start, when later than its slot
    # A start its host's rate limit reserved (host_limits); only within the process
    # that holds the claim, never in its payload.
    held: Reservation | None = field(default=None, compare=False)

    @property
    def starts_at(self) -> datetime:
        return self.start_at or self.scheduled_for

    def to_payload(self) -> ClaimPayload:
        """A JSON-safe form for Celery messages."""
        return {
            "endpoint_id": self.endpoint_id,
            "claim_token": str(self.claim_token),
            "scheduled_for": self.scheduled_for.isoformat(),
            "source": self.source,
            "trigger": self.trigger,
            "start_at": self.start_at.isoformat() if self.start_at else None,
        }

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> Claim:
        start_at = payload.get("start_at")
        return cls(
            endpoint_id=int(payload["endpoint_id"]),
            claim_token=uuid.UUID(payload["claim_token"]),
            scheduled_for=datetime.fromisoformat(payload["scheduled_for"]),
            source=str(payload["source"]),
            trigger=str(payload["trigger"]),
            start_at=datetime.fromisoformat(start_at) if start_at else None,
        )


# A slot claimed this late was missed by at least one tick: the scheduler or its
# database was down, or the slot's first claim was lost. Such a claim starts at a stable
# per-endpoint offset within SPREAD_OVER instead of at once, so that endpoints
# freed together do not keep one phase for good (start-to-start would keep the burst).
# Slots claimed on time are never delayed, however late their workers start them.
SPREAD_WHEN_LATE_BY = timedelta(seconds=1)
SPREAD_OVER = timedelta(seconds=1)
# The golden ratio's fraction spreads consecutive endpoint ids evenly over the window.
_SPREAD_STEP = 0.6180339887498949


def spread_start(endpoint_id: int, scheduled_for: datetime, now: datetime) -> datetime | None:
    """When a slot claimed at ``now`` should start, if it was missed by a tick; else None."""
    if now - scheduled_for <= SPREAD_WHEN_LATE_BY:
        return None
    return now + spread_offset(endpoint_id)


def spread_offset(endpoint_id: int) -> timedelta:
    """The endpoint's stable place within ``SPREAD_OVER``."""
    return SPREAD_OVER * ((endpoint_id * _SPREAD_STEP) % 1.0)


# --- Claim ----------------------------------------------------------------------------

# Due and unleased: the predicate the partial index ``endpoints_slot_claimable``
# (next_run_at WHERE claim_token IS NULL) serves, so the claim reads only slots it is
# about to take. Paused and archived endpoints need no test here: a pause moves the next
# run to its end and an archived endpoint has none (the governor and archive_endpoint
# see to it), and the start of a run checks both again (``_runnable``).
_CLAIMABLE = "c.claim_token IS NULL AND c.next_run_at <= %(due_by)s"

# The f-strings below only join the constant fragments above; values are parameters.
# The slots are taken by physical address (ctid): locked by the subquery, they cannot
# move before the UPDATE, which then needs no index lookup per slot.
_PG_CLAIM_UNLIMITED = f"""
UPDATE endpoints_slot AS s
SET claim_token = gen_random_uuid(),
    locked_until = GREATEST(%(now)s, s.next_run_at) + %(lease)s * INTERVAL '1 second'
WHERE s.ctid = ANY(ARRAY(
    SELECT c.ctid FROM endpoints_slot AS c
    JOIN endpoints_job AS j ON j.id = c.job_id
    WHERE {_CLAIMABLE} AND j.status = 'active' AND j.max_concurrent IS NULL
    ORDER BY c.next_run_at
    LIMIT %(limit)s
    FOR UPDATE OF c SKIP LOCKED
))
RETURNING s.endpoint_id, s.claim_token, s.next_run_at, s.next_run_source
"""  # noqa: S608

# Jobs with max_concurrent: one claimer at a time per job (the job row lock), so the
# leased count read by the next statement is current and two ticks cannot both fill
# the job's last slot. Jobs without a limit never take this path.
_PG_LOCK_LIMITED_JOBS = f"""
SELECT j.id FROM endpoints_job AS j
WHERE j.max_concurrent IS NOT NULL AND j.status = 'active'
  AND EXISTS (SELECT 1 FROM endpoints_slot AS c WHERE c.job_id = j.id AND {_CLAIMABLE})
ORDER BY j.id
FOR NO KEY UPDATE OF j SKIP LOCKED
"""  # noqa: S608

# ``free`` is MATERIALIZED so its leased count runs once per job: inlined, PostgreSQL ran
# it once per due row (bench/README.md, "Jobs with max_concurrent").
_PG_CLAIM_LIMITED = f"""
WITH free AS MATERIALIZED (
    SELECT j.id AS job_id, j.max_concurrent - (
        SELECT count(*) FROM endpoints_slot AS l
        WHERE l.job_id = j.id AND l.claim_token IS NOT NULL
    ) AS slots
    FROM endpoints_job AS j WHERE j.id = ANY(%(jobs)s)
), ranked AS (
    SELECT c.endpoint_id, c.job_id, c.next_run_at,
           row_number() OVER (PARTITION BY c.job_id ORDER BY c.next_run_at, c.endpoint_id)
               AS place
    FROM endpoints_slot AS c
    WHERE c.job_id = ANY(%(jobs)s) AND {_CLAIMABLE}
), chosen AS (
    SELECT r.endpoint_id FROM ranked AS r JOIN free AS f ON f.job_id = r.job_id
    WHERE r.place <= f.slots
    ORDER BY r.next_run_at
    LIMIT %(limit)s
)
UPDATE endpoints_slot AS s
SET claim_token = gen_random_uuid(),
    locked_until = GREATEST(%(now)s, s.next_run_at) + %(lease)s * INTERVAL '1 second'
FROM chosen
WHERE s.endpoint_id = chosen.endpoint_id AND s.claim_token IS NULL
RETURNING s.endpoint_id, s.claim_token, s.next_run_at, s.next_run_source
"""  # noqa: S608

# Expired leases (no live process renewed them: a worker died or stalled) go back to the
# claimable index here, through the ``endpoints_slot_leased`` index, so the claim
# itself only ever scans ``endpoints_slot_claimable``: O(expired), usually nothing.
# Releasing an expired lease first marks the claim's run lost, so that the worker that
# held it, if it was only stalled, can no longer finish it (its finish requires
# ``running``, and its reschedule goes in the same transaction as its finish): the slot's
# next claim then retries a lost run, never one that completed. A run locked by a
# transaction (its worker is writing its outcome right now) is skipped, and its slot is
# not released while the run is still ``running``: that worker reschedules it, or the
# next tick releases it. Runs first, then slots, the order the workers' writes take.
_PG_LOSE_EXPIRED_RUNS = """
UPDATE endpoints_run SET status = %(lost)s, finished_at = %(now)s, error = %(why)s
WHERE id IN (
    SELECT r.id FROM endpoints_slot AS s
    JOIN endpoints_run AS r ON r.endpoint_id = s.endpoint_id AND r.claim_token = s.claim_token
    WHERE s.claim_token IS NOT NULL AND s.locked_until <= %(now)s AND r.status = %(running)s
    FOR UPDATE OF r SKIP LOCKED
)
"""
_PG_RELEASE_EXPIRED = """
UPDATE endpoints_slot AS s SET claim_token = NULL, locked_until = NULL
WHERE s.endpoint_id IN (
    SELECT endpoint_id FROM endpoints_slot
    WHERE claim_token IS NOT NULL AND locked_until <= %(now)s
    FOR UPDATE SKIP LOCKED
) AND NOT EXISTS (
    SELECT 1 FROM endpoints_run AS r
    WHERE r.endpoint_id = s.endpoint_id AND r.claim_token = s.claim_token
    AND r.status = %(running)s
)
RETURNING s.endpoint_id
"""
EXPIRED_RUN_ERROR = (
    "Lost: its lease expired without being renewed (the worker died, stalled or lost the "
    "database before the run was recorded). The slot is retried."
)


# A slot made due by a run now or a follow-up starts a run of that trigger, not a slot's.
_TRIGGERS = {Source.MANUAL: RunTrigger.MANUAL, Source.FOLLOW_UP: RunTrigger.FOLLOW_UP}


def claim_due_endpoints(*, now: datetime, limit: int, horizon_ms: int) -> list[Claim]:
    """Claim up to ``limit`` endpoints due by ``now + horizon_ms``, earliest first.

    One short transaction: expired leases are released, jobs with ``max_concurrent``
    get at most their free slots, then the rest are taken in ``next_run_at`` order.
    """
    if limit < 1:
        return []
    params = {
        "now": now,
        "due_by": now + timedelta(milliseconds=horizon_ms),
        "lease": settings.CRONICORN_LEASE_SECONDS,
        "limit": limit,
    }
    with transaction.atomic():
        if connection.vendor == "postgresql":
            rows = _claim_postgresql(params)
        else:
            rows = _claim_portable(params)
    claims = [
        Claim(
            endpoint_id=endpoint_id,
            claim_token=token if isinstance(token, uuid.UUID) else uuid.UUID(str(token)),
            scheduled_for=scheduled_for,
            source=source or "",
            trigger=_TRIGGERS.get(source, RunTrigger.SCHEDULED),
            start_at=spread_start(endpoint_id, scheduled_for, now),
        )
        for endpoint_id, token, scheduled_for, source in rows
    ]
    claims.sort(key=lambda claim: (claim.scheduled_for, claim.endpoint_id))
    return claims


def _claim_postgresql(params: dict[str, Any]) -> list[tuple[Any, ...]]:
    # Once per tick: not worth preparing, and a generic plan could miss the partial index.
    release_expired_postgresql(params["now"])
    jobs = [row[0] for row in sql.fetch(_PG_LOCK_LIMITED_JOBS, params, prepare=False)]
    rows: list[tuple[Any, ...]] = []
    if jobs:
        rows = sql.fetch(_PG_CLAIM_LIMITED, {**params, "jobs": jobs}, prepare=False)
    remaining = params["limit"] - len(rows)
    if remaining > 0:
        unlimited = {**params, "limit": remaining}
        rows += sql.fetch(_PG_CLAIM_UNLIMITED, unlimited, prepare=False)
    return rows


def release_expired_postgresql(now: datetime) -> None:
    params = {
        "now": now,
        "lost": RunStatus.LOST.value,
        "running": RunStatus.RUNNING.value,
        "why": EXPIRED_RUN_ERROR,
    }
    sql.fetch(_PG_LOSE_EXPIRED_RUNS, params, prepare=False)
    for (endpoint_id,) in sql.fetch(_PG_RELEASE_EXPIRED, params, prepare=False):
        log_event(logging.WARNING, "lease expired; released for a retry", endpoint_id=endpoint_id)


def release_expired_portable(now: datetime) -> None:
    """The same where one transaction writes at a time (SQLite: no run is being written
    by another transaction meanwhile)."""
    expired = Slot.objects.filter(claim_token__isnull=False, locked_until__lte=now)
    for endpoint_id, token in expired.values_list("pk", "claim_token"):
        Run.objects.filter(
            endpoint_id=endpoint_id, claim_token=token, status=RunStatus.RUNNING
        ).update(status=RunStatus.LOST, finished_at=now, error=EXPIRED_RUN_ERROR)
        log_event(logging.WARNING, "lease expired; released for a retry", endpoint_id=endpoint_id)
    expired.update(claim_token=None, locked_until=None)


def _claim_portable(params: dict[str, Any]) -> list[tuple[Any, ...]]:
    """SQLite (and any other backend): the same claim inside the immediate transaction.

    The settings open SQLite transactions with BEGIN IMMEDIATE, so this transaction holds
    the write lock from its first statement and no other claimer can interleave.
    """
    now = params["now"]
    release_expired_portable(now)

    due = Slot.objects.filter(
        claim_token__isnull=True, next_run_at__lte=params["due_by"], job__status=JobStatus.ACTIVE
    ).order_by("next_run_at", "pk")
    fields = ("pk", "next_run_at", "next_run_source")
    chosen = _within_free_slots(due.filter(job__max_concurrent__isnull=False))
    chosen = chosen[: params["limit"]]
    remaining = params["limit"] - len(chosen)
    chosen += list(due.filter(job__max_concurrent__isnull=True).values(*fields)[:remaining])

    lease_for = timedelta(seconds=params["lease"])
    rows = []
    for row in chosen:
        token = uuid.uuid4()
        lease = max(now, row["next_run_at"]) + lease_for
        Slot.objects.filter(pk=row["pk"]).update(claim_token=token, locked_until=lease)
        rows.append((row["pk"], token, row["next_run_at"], row["next_run_source"]))
    return rows


def _within_free_slots(due: Any) -> list[dict[str, Any]]:
    rows = list(due.values("pk", "job_id", "next_run_at", "next_run_source"))
    if not rows:
        return []
    job_ids = {row["job_id"] for row in rows}
    limits = dict(Job.objects.filter(pk__in=job_ids).values_list("pk", "max_concurrent"))
    leased = dict(
        Slot.objects.filter(job_id__in=job_ids, claim_token__isnull=False)
        .values("job_id")
        .annotate(n=Count("pk"))
        .values_list("job_id", "n")
    )
    free = {job_id: limits[job_id] - leased.get(job_id, 0) for job_id in job_ids}
    chosen = []
    for row in rows:
        if free[row["job_id"]] > 0:
            free[row["job_id"]] -= 1
            chosen.append({k: v for k, v in row.items() if k != "job_id"})
    return chosen


def release_claims(claims: Iterable[Claim]) -> int:
    """Give back claims that will not run (shutdown, broker down) so the next tick takes them."""
    released = 0
    for claim in claims:
        released += Slot.objects.filter(pk=claim.endpoint_id, claim_token=claim.claim_token).update(
            claim_token=None, locked_until=None
        )
    return released


def tick(
    *, now: datetime | None = None, dispatch: Callable[[list[Claim]], Any] | None = None
) -> list[Claim]:
    """One scheduler tick: claim what is due within the horizon, batch after batch, until
    nothing due is left or half the tick is spent, and record a heartbeat.

    A fixed batch per tick would silently cap the fleet at ``CRONICORN_BATCH_SIZE`` runs
    per tick (trap 17), so the batch only bounds one transaction. ``dispatch`` receives
    each batch once it is committed (the Celery tick task enqueues it, ``runscheduler``
    hands it to its dispatcher), so the first runs start while later batches are claimed.
    Returns every claim taken.
    """
    now = now or timezone.now()
    budget_ends = time.monotonic() + settings.CRONICORN_TICK_SECONDS / 2
    batch = settings.CRONICORN_BATCH_SIZE
    claims: list[Claim] = []
    while True:
        taken = claim_due_endpoints(
            now=now, limit=batch, horizon_ms=settings.CRONICORN_CLAIM_HORIZON_MS
        )
        claims += taken
        if dispatch is not None and taken:
            dispatch(taken)
        if len(taken) < batch or time.monotonic() >= budget_ends:
            break
    # The heartbeat is only the last pass: a long silence before this one is kept apart.
    previous = Heartbeat.objects.filter(name="tick").values_list("at", flat=True).first()
    Heartbeat.beat("tick", now=now, claimed=len(claims))
    note_tick(previous, now=now)
    metrics.record_claims(len(claims))
    if logger.isEnabledFor(logging.DEBUG):
        for claim in claims:
            log_event(
                logging.DEBUG, f"claimed for {claim.scheduled_for:%H:%M:%S.%f} UTC", claim=claim
            )
    return claims
