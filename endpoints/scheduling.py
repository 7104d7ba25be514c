"""Every cross-model workflow of the endpoints app: claim, execute, reschedule, manual ops.

The life of a run (DESIGN.md "Life of a run"):

1. ``claim_due_endpoints`` takes due endpoints in one short transaction and gives each a
   fresh claim token and a lease that outlasts the run.
2. The caller (the Celery tick task or ``runscheduler``) starts each claim at its
   ``scheduled_for``.
3. ``execute_claim`` records the Run, calls the endpoint outside any transaction,
   finishes the Run, and reschedules the endpoint in one conditional update on the
   claim token, which also releases the lease.

Every state change here is a conditional ``update()`` whose row count says who won.
"""

from __future__ import annotations

import logging
import secrets
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import (
    DatabaseError,
    IntegrityError,
    InterfaceError,
    OperationalError,
    connection,
    transaction,
)
from django.db.models import Count, F, Q, Value
from django.db.models.functions import Concat
from django.utils import timezone

from cronicorn_site.logs import log_context
from endpoints import hot_path, metrics
from endpoints.executor import (
    HttpRequest,
    HttpResult,
    NetworkPolicy,
    perform_request,
    submit_request,
)
from endpoints.governor import EndpointSchedule, Plan, plan_after_edit, plan_next_run
from endpoints.hot_path import ClaimedEndpoint
from endpoints.models import (
    Endpoint,
    Heartbeat,
    HintHistory,
    HintKind,
    Job,
    JobStatus,
    Run,
    RunStatus,
    RunTrigger,
    Slot,
    Source,
    Tenant,
)
from endpoints.schedules import describe_delta, describe_duration
from endpoints.secrets import strip_userinfo
from endpoints.validation import reason_problem

logger = logging.getLogger("cronicorn.scheduler")

# The database is away (restart, failover, network): worth trying the same writes again,
# unlike an error in the data. psycopg reports a lost or refused connection, and a
# deadlock, as OperationalError; a connection Django already knows is closed as
# InterfaceError.
UNAVAILABLE = (OperationalError, InterfaceError)

PRUNE_BATCH_SIZE = 1_000
# Leases renewed per statement (SQLite allows a few thousand parameters).
RENEW_CHUNK = 500
HEALTH_LATENESS_SAMPLE = 10_000
# A scheduled run that starts later than this is a catch-up after downtime (no scheduler
# was running when it came due), counted apart from lateness. Leases and ticks are
# seconds, so a running scheduler is never this late unless it is overloaded.
CATCHUP_AFTER = timedelta(minutes=1)
# After a scheduler error (not an endpoint failure) the endpoint is tried again this late.
ERROR_RETRY = timedelta(minutes=1)
RESULT_STATUS = {
    "success": RunStatus.SUCCESS,
    "failure": RunStatus.FAILURE,
    "timeout": RunStatus.TIMEOUT,
}
NO_HINT: dict[str, Any] = {
    "ai_hint_interval_ms": None,
    "ai_hint_next_run_at": None,
    "ai_hint_expires_at": None,
    "ai_hint_reason": "",
}


class OperationRefused(Exception):
    """A manual operation that cannot proceed; the message says why and what to do."""


@dataclass(frozen=True)
class Claim:
    endpoint_id: int
    claim_token: uuid.UUID
    scheduled_for: datetime  # the slot (the Run's scheduled_for)
    source: str
    trigger: str
    start_at: datetime | None = None  # a catch-up's start, when later than its slot

    @property
    def starts_at(self) -> datetime:
        return self.start_at or self.scheduled_for

    def to_payload(self) -> dict[str, Any]:
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


def _log(
    level: int,
    message: str,
    *,
    claim: Claim | None = None,
    exc: bool | BaseException = False,
    **ids: Any,
) -> None:
    """Log with endpoint id, run id, claim token and source as ``extra`` fields, which the
    formatters (cronicorn_site.logs) print on every line."""
    context = {
        "endpoint_id": ids.get("endpoint_id", claim.endpoint_id if claim else None),
        "run_id": ids.get("run_id"),
        "claim_token": str(claim.claim_token) if claim else ids.get("claim_token"),
        "source": claim.source if claim else ids.get("source"),
    }
    logger.log(level, message, extra=context, exc_info=exc)


def _ids(claim: Claim, run_id: int) -> dict[str, Any]:
    return {
        "endpoint_id": claim.endpoint_id,
        "run_id": run_id,
        "claim_token": str(claim.claim_token),
        "source": claim.source,
    }


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
_PG_RELEASE_EXPIRED = """
UPDATE endpoints_slot SET claim_token = NULL, locked_until = NULL
WHERE endpoint_id IN (
    SELECT endpoint_id FROM endpoints_slot
    WHERE claim_token IS NOT NULL AND locked_until <= %(now)s
    FOR UPDATE SKIP LOCKED
)
RETURNING endpoint_id
"""


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
            trigger=RunTrigger.MANUAL if source == Source.MANUAL else RunTrigger.SCHEDULED,
            start_at=spread_start(endpoint_id, scheduled_for, now),
        )
        for endpoint_id, token, scheduled_for, source in rows
    ]
    claims.sort(key=lambda claim: (claim.scheduled_for, claim.endpoint_id))
    return claims


def _claim_postgresql(params: dict[str, Any]) -> list[tuple[Any, ...]]:
    # Once per tick: not worth preparing, and a generic plan could miss the partial index.
    _release_expired_postgresql(params["now"])
    jobs = [row[0] for row in hot_path.fetch(_PG_LOCK_LIMITED_JOBS, params, prepare=False)]
    rows: list[tuple[Any, ...]] = []
    if jobs:
        rows = hot_path.fetch(_PG_CLAIM_LIMITED, {**params, "jobs": jobs}, prepare=False)
    remaining = params["limit"] - len(rows)
    if remaining > 0:
        unlimited = {**params, "limit": remaining}
        rows += hot_path.fetch(_PG_CLAIM_UNLIMITED, unlimited, prepare=False)
    return rows


def _release_expired_postgresql(now: datetime) -> None:
    for (endpoint_id,) in hot_path.fetch(_PG_RELEASE_EXPIRED, {"now": now}, prepare=False):
        _log(logging.WARNING, "lease expired; released for a retry", endpoint_id=endpoint_id)


def _claim_portable(params: dict[str, Any]) -> list[tuple[Any, ...]]:
    """SQLite (and any other backend): the same claim inside the immediate transaction.

    The settings open SQLite transactions with BEGIN IMMEDIATE, so this transaction holds
    the write lock from its first statement and no other claimer can interleave.
    """
    now = params["now"]
    expired = Slot.objects.filter(claim_token__isnull=False, locked_until__lte=now)
    for endpoint_id in expired.values_list("pk", flat=True):
        _log(logging.WARNING, "lease expired; released for a retry", endpoint_id=endpoint_id)
    expired.update(claim_token=None, locked_until=None)

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
    Heartbeat.beat("tick", now=now, claimed=len(claims))
    metrics.record_claims(len(claims))
    if logger.isEnabledFor(logging.DEBUG):
        for claim in claims:
            _log(logging.DEBUG, f"claimed for {claim.scheduled_for:%H:%M:%S.%f} UTC", claim=claim)
    return claims


# --- Execute and reschedule -----------------------------------------------------------


@dataclass
class Outcome:
    """A run whose request is done and whose outcome is not written yet."""

    endpoint: ClaimedEndpoint
    claim: Claim
    run: Run
    started: datetime
    finished: datetime
    result: HttpResult


@dataclass
class Started:
    """A run recorded as running, whose endpoint is still to be called."""

    endpoint: ClaimedEndpoint
    claim: Claim
    run: Run
    started: datetime

    def call(self, *, policy: NetworkPolicy | None = None) -> Future[HttpResult]:
        """Start the request on the HTTP event loop; the future resolves with its result."""
        with self._log_context():
            return submit_request(self._request(), policy=policy)

    def call_and_wait(self, *, policy: NetworkPolicy | None = None) -> HttpResult:
        with self._log_context():
            return perform_request(self._request(), policy=policy)

    def outcome(self, result: HttpResult) -> Outcome:
        return Outcome(self.endpoint, self.claim, self.run, self.started, timezone.now(), result)

    def _request(self) -> HttpRequest:
        return _request_for(
            self.endpoint, self.endpoint.hmac_secret, self.endpoint.hmac_secret_previous
        )

    def _log_context(self) -> AbstractContextManager[None]:
        # The executor's lines for this request carry the run's ids too.
        return log_context(
            endpoint_id=self.claim.endpoint_id,
            claim_token=str(self.claim.claim_token),
            run_id=self.run.pk,
            source=self.claim.source,
        )


def execute_claim(claim: Claim, *, policy: NetworkPolicy | None = None) -> Run | None:
    """Run one claim: record the Run, call the endpoint, finish the Run, reschedule.

    A stale or duplicate claim (its token no longer on the endpoint) does nothing and
    returns None. Errors stay inside this claim: they are logged and recorded on its Run.
    """
    called = call_claim(claim, policy=policy)
    if isinstance(called, Outcome):
        record_outcomes([called])
        return called.run
    return called


def call_claim(claim: Claim, *, policy: NetworkPolicy | None = None) -> Outcome | Run | None:
    """The first half of ``execute_claim``: record the Run and call the endpoint.

    Returns the ``Outcome`` to hand to ``record_outcomes``; or the Run, already recorded,
    when a scheduler error cut it short; or None for a stale claim (nothing done).
    """
    [started] = start_claims([claim])
    if started is None:
        return None
    try:
        result = started.call_and_wait(policy=policy)
    except Exception as exc:
        _recover(started.endpoint, claim, started.run, started.started, exc)
        return started.run
    return started.outcome(result)


def start_claims(claims: Sequence[Claim]) -> list[Started | None]:
    """Record the Runs of claims that start together, before their requests.

    The endpoints are read in one query and the Runs of scheduled slots inserted in one
    statement (the dispatcher starts what is due together: under load, many). For each
    claim, its ``Started``, or None when there is nothing to run: a stale claim (its token
    no longer on the endpoint), an endpoint paused or archived since the claim (its lease
    released), or an error (logged; the claim given back).

    Raises ``UNAVAILABLE`` when the database cannot be reached before anything was
    written, so the caller, which still holds the claims, may start them again shortly.
    """
    try:
        now = _wait_for_slot(max(claim.scheduled_for for claim in claims))
        endpoints = hot_path.load_endpoints([claim.endpoint_id for claim in claims])
    except UNAVAILABLE:
        raise
    except Exception:
        _give_back(claims)
        return [None] * len(claims)
    started: list[Started | None] = [None] * len(claims)
    ready: dict[int, tuple[int, ClaimedEndpoint, Claim]] = {}  # by endpoint: one run each
    for index, claim in enumerate(claims):
        if claim.endpoint_id in ready:
            _log(logging.WARNING, "duplicate claim in the same start; nothing done", claim=claim)
            continue
        try:
            endpoint = _runnable(claim, endpoints.get(claim.endpoint_id), now)
        except Exception:
            _give_back([claim])
            continue
        if endpoint is not None:
            ready[claim.endpoint_id] = (index, endpoint, claim)
    slots = [(i, e, c) for i, e, c in ready.values() if c.trigger == RunTrigger.SCHEDULED]
    inserted = _insert_runs_of_slots(slots, now) if len(slots) > 1 else {}
    for index, endpoint, claim in ready.values():
        run = inserted.get(index)
        if run is None:
            try:
                run = _start_run(endpoint, claim, now)
            except Exception:
                _give_back([claim])
                continue
        if run is not None:
            started[index] = Started(endpoint, claim, run, now)
    return started


def _give_back(claims: Sequence[Claim]) -> None:
    """Claims whose runs could not be recorded (the database went away, say) are released
    at once for the next tick; if even that fails, their short leases expire unrenewed."""
    why = "could not start the run"
    try:
        released = release_claims(claims)
    except Exception:
        released = -1
    for claim in claims:
        if released < 0:
            lease = settings.CRONICORN_LEASE_SECONDS
            text = f"{why}; the claim could not be released either, its lease ends within {lease} s"
        else:
            text = f"{why}; the claim is released for the next tick"
        _log(logging.ERROR, text, claim=claim, exc=True)


def _insert_runs_of_slots(
    slots: Sequence[tuple[int, ClaimedEndpoint, Claim]], now: datetime
) -> dict[int, Run]:
    """The Runs of several scheduled slots in one statement, by claim index. A slot that
    already has a Run (a reclaimed lease), or a statement that fails, is left to
    ``_start_run``, one by one."""
    fields = [_run_fields(endpoint, claim, now) for _index, endpoint, claim in slots]
    try:
        with _statement_guard():
            ids = hot_path.insert_runs_of_slots(fields)
    except DatabaseError:
        return {}
    return {
        index: Run(pk=run_id, **values)
        for (index, _endpoint, _claim), values, run_id in zip(slots, fields, ids, strict=True)
        if run_id is not None
    }


def record_outcomes(outcomes: Sequence[Outcome]) -> None:
    """Finish the Runs and reschedule their endpoints; several outcomes in one transaction.

    Each reschedule is conditional on its claim token and planning fields (see
    ``_reschedule``); one that loses is re-read and planned again on its own. If the
    transaction fails (a body the database refuses), each outcome is written on its own,
    so one bad run never costs the others their records.
    """
    if len(outcomes) == 1:
        _record_alone(outcomes[0])  # two statements; a transaction would double the trips
        return
    finishes, reschedules, broken = [], [], []
    for outcome in outcomes:
        finishes.append((outcome.run.pk, _finish_values(outcome)))
        try:
            values = _next_state(outcome, outcome.endpoint)
        except Exception as exc:  # a schedule the governor cannot plan: recorded below
            broken.append((outcome, exc))
            continue
        reschedules.append((outcome, values))
    try:
        with transaction.atomic():
            finished = hot_path.finish_runs(finishes)
            won = hot_path.reschedule_all(
                [(o.endpoint, o.claim.claim_token, values) for o, values in reschedules]
            )
    except UNAVAILABLE:
        raise  # nothing was written: the caller may try the whole batch again
    except DatabaseError:
        for outcome in outcomes:
            _record_alone(outcome)
        return
    for outcome, updated in zip(outcomes, finished, strict=True):
        _log_finish(outcome, updated)
    for (outcome, values), ok in zip(reschedules, won, strict=True):
        if ok:
            _log_rescheduled(outcome, values)
            continue
        try:
            _reschedule_after_conflict(outcome)
        except Exception as exc:
            broken.append((outcome, exc))
    for outcome, error in broken:
        _recover(outcome.endpoint, outcome.claim, outcome.run, outcome.started, error)


def _record_alone(outcome: Outcome) -> None:
    """One outcome on its own: the Run (without its body if the database refuses the
    body), then the reschedule; any other error is recorded by ``_recover``."""
    try:
        values = _finish_values(outcome)
        try:
            with _statement_guard():
                updated = hot_path.finish_runs([(outcome.run.pk, values)])[0]
        except UNAVAILABLE:
            raise
        except DatabaseError as exc:  # e.g. a NUL character, which PostgreSQL's jsonb refuses
            values["response_body"] = None
            values["error"] = f"{values['error']} (the response body could not be stored: {exc})"
            updated = hot_path.finish_runs([(outcome.run.pk, values)])[0]
        _log_finish(outcome, updated)
        _reschedule(outcome, outcome.endpoint)
    except UNAVAILABLE:
        raise  # the database is away: the caller may try again
    except Exception as exc:
        _recover(outcome.endpoint, outcome.claim, outcome.run, outcome.started, exc)


def _wait_for_slot(scheduled_for: datetime) -> datetime:
    """Never start before the slot: a cron run started early would plan the same slot again.

    Callers already start claims on time; this only absorbs a few ms of timer jitter and
    is capped at one tick.
    """
    now = timezone.now()
    early = (scheduled_for - now).total_seconds()
    if early > 0:
        time.sleep(min(early, settings.CRONICORN_TICK_SECONDS))
        now = timezone.now()
    return now


def _runnable(
    claim: Claim, endpoint: ClaimedEndpoint | None, now: datetime
) -> ClaimedEndpoint | None:
    """The endpoint if the claim is still ours and still meant to run."""
    if endpoint is None or endpoint.claim_token != claim.claim_token:
        _log(logging.INFO, "stale claim: the lease is no longer ours; nothing done", claim=claim)
        return None
    reason = _why_not_runnable(endpoint, now)
    if reason:
        _drop_claim(claim, endpoint, now)
        _log(logging.INFO, f"claim dropped: {reason}", claim=claim)
        return None
    return _ensure_lease_at_start(endpoint, claim, now)


def _drop_claim(claim: Claim, endpoint: ClaimedEndpoint, now: datetime) -> None:
    """Release a claim that will not run. The claim reads only slots, so a slot that
    disagrees with its endpoint is put right here, or the next tick would take it again:
    an archived endpoint gets no next run, a paused one its pause's end (the governor's
    plan). A paused job's endpoints keep theirs; the claim skips the job."""
    values: dict[str, Any] = {}
    if endpoint.archived_at is not None:
        values = {"next_run_at": None, "next_run_source": ""}
    elif endpoint.is_paused(now):
        plan = plan_next_run(now, EndpointSchedule.from_endpoint(endpoint))
        values = {"next_run_at": plan.next_run_at, "next_run_source": plan.source}
    Slot.objects.filter(pk=claim.endpoint_id, claim_token=claim.claim_token).update(
        claim_token=None, locked_until=None, **values
    )


def _why_not_runnable(endpoint: ClaimedEndpoint, now: datetime) -> str:
    if endpoint.archived_at is not None:
        return "the endpoint was archived"
    if endpoint.job_status != JobStatus.ACTIVE:
        return f"the job is {endpoint.job_status}"
    if endpoint.is_paused(now):
        return f"the endpoint is paused until {endpoint.paused_until}"
    return ""


def _ensure_lease_at_start(
    endpoint: ClaimedEndpoint, claim: Claim, now: datetime
) -> ClaimedEndpoint | None:
    """A claim that starts late (a busy worker) renews its lease before calling out if less
    than half of it is left, so it cannot expire before the first renewal (``renew_leases``)
    and let a second claimer run the slot concurrently. An expired lease is not revived:
    another claimer may hold the slot already."""
    assert endpoint.locked_until is not None
    lease = timedelta(seconds=settings.CRONICORN_LEASE_SECONDS)
    if endpoint.locked_until >= now + lease / 2:
        return endpoint
    extended = Slot.objects.filter(
        pk=endpoint.pk, claim_token=claim.claim_token, locked_until__gt=now
    ).update(locked_until=now + lease)
    if not extended:
        _log(logging.WARNING, "stale claim: the lease expired before the run", claim=claim)
        return None
    endpoint.locked_until = now + lease
    return endpoint


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


def _statement_guard() -> AbstractContextManager[Any]:
    """Lets a statement fail without spoiling the connection: a savepoint inside a
    transaction; nothing in autocommit (the hot path), where a failed statement is its own
    rolled-back transaction and BEGIN/COMMIT would double the run's round trips."""
    return transaction.atomic() if connection.in_atomic_block else nullcontext()


def _start_run(endpoint: ClaimedEndpoint, claim: Claim, started: datetime) -> Run | None:
    """Create the Run before the request; None if this claim's run exists already.

    One run per claim (DESIGN "Redelivery is a no-op"): a broker may deliver the same
    claim again (a connection drop restores unacknowledged messages, a duplicate publish,
    a visibility timeout) while its run is in flight, and the token is still on the slot.
    The database decides, not the message: a slot's attempts are unique
    (``endpoints_run_one_per_slot`` for scheduled runs, ``endpoints_run_one_per_attempt``
    for the others), so of two deliveries racing here one insert fails and finds the
    other's run, with its own token. An earlier attempt under *another* token is a run
    whose lease expired (its worker stopped renewing it): only then is it retried.
    """
    fields = _run_fields(endpoint, claim, started)
    previous = None
    if claim.trigger != RunTrigger.SCHEDULED:
        previous = _latest_attempt(endpoint.pk, claim.scheduled_for)
    if previous is None:
        try:
            with _statement_guard():
                return Run(pk=hot_path.insert_run(fields), **fields)
        except IntegrityError:
            previous = _latest_attempt(endpoint.pk, claim.scheduled_for)
            if previous is None:
                raise
    if previous.claim_token == claim.claim_token:
        _log_redelivered(claim, previous)
        return None
    _mark_lost(previous, started, _lost_reason(previous, claim))
    fields.update(trigger=RunTrigger.RETRY, attempt=previous.attempt + 1, retry_of=previous)
    try:
        with _statement_guard():
            run = Run.objects.create(**fields)
    except IntegrityError:  # the same claim, delivered twice, started its retry first
        latest = _latest_attempt(endpoint.pk, claim.scheduled_for)
        if latest is None or latest.claim_token != claim.claim_token:
            raise
        _log_redelivered(claim, latest)
        return None
    _log(logging.WARNING, f"retrying run {previous.pk} (lost)", claim=claim, run_id=run.pk)
    return run


def _log_redelivered(claim: Claim, run: Run) -> None:
    _log(
        logging.INFO,
        f"claim delivered again; its run {run.pk} already started ({run.status}); nothing done",
        claim=claim,
        run_id=run.pk,
    )


def _lost_reason(previous: Run, claim: Claim) -> str:
    expired = previous.lease_expires_at
    when = f" at {expired:%H:%M:%S}Z" if expired else ""
    return (
        f"its lease expired{when} without being renewed (its worker died, stalled or lost "
        f"the database); retried by claim {claim.claim_token}"
    )


def _run_fields(endpoint: ClaimedEndpoint, claim: Claim, started: datetime) -> dict[str, Any]:
    """The columns of a Run as it starts."""
    return {
        "endpoint_id": endpoint.pk,
        "trigger": claim.trigger,
        "source": claim.source,
        "scheduled_for": claim.scheduled_for,
        "started_at": started,
        "status": RunStatus.RUNNING,
        "claim_token": claim.claim_token,
        "lease_expires_at": endpoint.locked_until,
        "request_method": endpoint.method,
        "request_url": strip_userinfo(endpoint.url),  # the password is a secret
        "attempt": 1,
        "response_truncated": False,
        "error": "",
    }


def _latest_attempt(endpoint_id: int, scheduled_for: datetime) -> Run | None:
    return (
        Run.objects.filter(endpoint_id=endpoint_id, scheduled_for=scheduled_for)
        .exclude(trigger=RunTrigger.TEST)
        .only("pk", "status", "attempt", "claim_token", "lease_expires_at")
        .order_by("-attempt", "-pk")
        .first()
    )


def _mark_lost(run: Run, now: datetime, why: str) -> None:
    Run.objects.filter(pk=run.pk, status=RunStatus.RUNNING).update(
        status=RunStatus.LOST, finished_at=now, error=f"Lost: {why}."
    )


def _request_for(
    endpoint: ClaimedEndpoint | Endpoint, hmac_secret: str, hmac_previous: str = ""
) -> HttpRequest:
    return HttpRequest(
        url=endpoint.url,
        method=endpoint.method,
        headers=dict(endpoint.headers or {}),
        body=endpoint.body,
        timeout_ms=endpoint.timeout_ms,
        max_response_size_kb=endpoint.max_response_size_kb,
        hmac_secret=hmac_secret,
        hmac_previous_secret=hmac_previous,
        secret_header_names=tuple(endpoint.secret_header_names or ()),
    )


def _finish_values(outcome: Outcome) -> dict[str, Any]:
    """The Run's outcome columns."""
    result = outcome.result
    return {
        "status": RESULT_STATUS.get(result.status, RunStatus.FAILURE),
        "finished_at": outcome.finished,
        "duration_ms": max(int(result.duration_ms), 0),
        "status_code": result.status_code,
        "response_body": result.body,
        "response_truncated": result.truncated,
        "response_size_bytes": result.size_bytes,
        "response_headers": result.headers or None,
        "error": result.error or "",
    }


def _log_finish(outcome: Outcome, updated: bool) -> None:
    """Count a finished run; the run's line is logged once its next run is known
    (``_log_rescheduled``). ``updated`` is False if its row was no longer running
    (declared lost meanwhile) or is gone (its endpoint was deleted): said here."""
    status = RESULT_STATUS.get(outcome.result.status, RunStatus.FAILURE)
    duration = outcome.result.duration_ms
    if updated:
        metrics.record_run(outcome.run, status=status, duration_ms=max(int(duration), 0))
        return
    if Run.objects.filter(pk=outcome.run.pk).exists():
        word = f"{status} after it was declared lost; the record stays lost"
    else:
        word = f"{status} after its endpoint was deleted; nothing recorded"
    _log(logging.WARNING, f"run {word} ({duration} ms)", claim=outcome.claim, run_id=outcome.run.pk)


def _recover(
    endpoint: ClaimedEndpoint, claim: Claim, run: Run, started: datetime, exc: Exception
) -> None:
    """Log and record the error on the run and try again later, so one broken endpoint (a
    corrupt schedule, a body the database refuses) neither loops nor holds its lease.
    The log line carries ``exc``'s traceback."""
    _log(logging.ERROR, "scheduler error during the run", claim=claim, run_id=run.pk, exc=exc)
    now = timezone.now()
    note = f"Scheduler error: {type(exc).__name__}: {exc}"
    try:
        Run.objects.filter(pk=run.pk, status=RunStatus.RUNNING).update(
            status=RunStatus.FAILURE, finished_at=now
        )
        Run.objects.filter(pk=run.pk).update(error=Concat(F("error"), Value(f"\n{note}")))
        with transaction.atomic():
            # The endpoint's row first, as every writer of both rows locks them.
            Endpoint.objects.select_for_update(no_key=True).filter(pk=endpoint.pk).exists()
            if Slot.objects.filter(pk=endpoint.pk, claim_token=claim.claim_token).update(
                next_run_at=now + ERROR_RETRY, locked_until=None, claim_token=None
            ):
                Endpoint.objects.filter(pk=endpoint.pk).update(
                    last_run_at=started, failure_count=F("failure_count") + 1
                )
    except Exception:
        _log(logging.ERROR, "could not record the error", claim=claim, run_id=run.pk, exc=True)


def _reschedule(outcome: Outcome, endpoint: ClaimedEndpoint) -> bool:
    """DESIGN step 4 in one conditional update on our claim token, which releases the lease.

    A person may change the schedule, hints or pause while the run is in flight; the
    update only wins if those are as ``endpoint`` read them, otherwise it re-reads and
    plans again. Returns False when the lease was lost: the run is kept, the endpoint
    left alone.
    """
    for _attempt in range(3):
        values = _next_state(outcome, endpoint)
        if hot_path.reschedule_all([(endpoint, outcome.claim.claim_token, values)])[0]:
            _log_rescheduled(outcome, values)
            return True
        fresh = _reread_own(outcome.claim)
        if fresh is None:
            return False
        endpoint = fresh
    _log(logging.ERROR, "endpoint kept changing; left for the lease to expire", claim=outcome.claim)
    return False


def _reschedule_after_conflict(outcome: Outcome) -> bool:
    """A batched reschedule that lost: plan again from the endpoint as it is now."""
    fresh = _reread_own(outcome.claim)
    return fresh is not None and _reschedule(outcome, fresh)


def _reread_own(claim: Claim) -> ClaimedEndpoint | None:
    """The endpoint as it is now, or None (logged) if our claim is no longer on it."""
    fresh = hot_path.load_endpoint(claim.endpoint_id)
    if fresh is None:
        _log(logging.INFO, "the endpoint was deleted during its run; nothing to plan", claim=claim)
        return None
    if fresh.claim_token != claim.claim_token:
        _log(logging.WARNING, "lease lost; run kept, endpoint not rescheduled", claim=claim)
        return None
    return fresh


def _log_rescheduled(outcome: Outcome, values: Mapping[str, Any]) -> None:
    """The run's one line: ``job/endpoint status HTTP code in duration, next run at
    (source)`` and the error for a failure. Successes at INFO; failures and recoveries
    at WARNING, so ``runscheduler --quiet`` shows just those. JSON logs carry the same
    fields."""
    result, failed = outcome.result, outcome.result.status != "success"
    recovered = not failed and outcome.endpoint.failure_count > 0
    level = logging.WARNING if failed or recovered else logging.INFO
    if not logger.isEnabledFor(level):
        return
    word = RESULT_STATUS.get(result.status, RunStatus.FAILURE).value
    word = "success (recovered)" if recovered else word
    code = f" HTTP {result.status_code}" if result.status_code else ""
    when, why = values["next_run_at"], values["next_run_source"]
    then = f"next run {when:%Y-%m-%d %H:%M:%S}Z ({why})" if when else "no next run (archived)"
    error = f": {result.error}" if failed and result.error else ""
    ref = endpoint_ref(outcome.claim.endpoint_id)
    fields = {
        "endpoint": ref,
        "status": word,
        "status_code": result.status_code,
        "duration_ms": result.duration_ms,
        "next_run_at": when.isoformat() if when else None,
        "next_run_source": why,
        "error": result.error or None,
    }
    logger.log(
        level,
        f"{ref} {word}{code} in {describe_duration(result.duration_ms)}, {then}{error}",
        extra={**_ids(outcome.claim, outcome.run.pk), **fields},
    )


# Names of endpoints for run lines, read once per endpoint and kept a minute (a rename
# shows within a minute); the hot path reads no names.
_REFS: dict[int, tuple[str, float]] = {}
REF_TTL_SECONDS = 60.0


def endpoint_ref(endpoint_id: int) -> str:
    """``job/endpoint`` of an endpoint, cached for a minute."""
    cached = _REFS.get(endpoint_id)
    if cached is not None and time.monotonic() - cached[1] < REF_TTL_SECONDS:
        return cached[0]
    row = Endpoint.objects.filter(pk=endpoint_id).values_list("job__name", "name").first()
    ref = f"{row[0]}/{row[1]}" if row else f"endpoint {endpoint_id}"
    _REFS[endpoint_id] = (ref, time.monotonic())
    return ref


def _next_state(outcome: Outcome, endpoint: ClaimedEndpoint) -> dict[str, Any]:
    """What the endpoint becomes after ``outcome``: failure count, hints, next run."""
    started, finished = outcome.started, outcome.finished
    failure_count = 0 if outcome.result.status == "success" else endpoint.failure_count + 1
    hints = _hints_after_run(endpoint, started)
    schedule = replace(
        EndpointSchedule.from_endpoint(endpoint),
        failure_count=failure_count,
        **{k: v for k, v in hints.items() if k != "ai_hint_reason"},
    )
    # Start-to-start cadence; a run slower than its interval plans from its end instead,
    # or the endpoint would be due again the moment it finished (trap 3).
    plan = plan_next_run(started, schedule)
    if plan.next_run_at <= finished:
        plan = plan_next_run(finished, schedule)
    archived = endpoint.archived_at is not None  # archived in flight: no next run
    return {
        "last_run_at": started,
        "next_run_at": None if archived else plan.next_run_at,
        "next_run_source": "" if archived else plan.source,
        "failure_count": failure_count,
        **hints,
    }


def _hints_after_run(endpoint: ClaimedEndpoint, started: datetime) -> dict[str, Any]:
    """Expired hints go entirely; a one-shot whose time has come is consumed (trap 12)."""
    current = {
        "ai_hint_interval_ms": endpoint.ai_hint_interval_ms,
        "ai_hint_next_run_at": endpoint.ai_hint_next_run_at,
        "ai_hint_expires_at": endpoint.ai_hint_expires_at,
        "ai_hint_reason": endpoint.ai_hint_reason,
    }
    expires = endpoint.ai_hint_expires_at
    if expires is not None and expires <= started:
        return dict(NO_HINT)
    oneshot = endpoint.ai_hint_next_run_at
    if oneshot is not None and oneshot <= started:
        if endpoint.ai_hint_interval_ms is None:
            return dict(NO_HINT)
        return {**current, "ai_hint_next_run_at": None}
    return current


# --- Safety nets ----------------------------------------------------------------------


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
            _release_expired_postgresql(now)
        else:
            Slot.objects.filter(claim_token__isnull=False, locked_until__lte=now).update(
                claim_token=None, locked_until=None
            )
    metrics.record_zombies(lost)
    if lost:
        _log(logging.WARNING, f"{lost} run(s) past their lease marked lost")
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
        _log(logging.INFO, f"pruned {deleted} run(s) older than {cutoff:%Y-%m-%d}")
    return deleted


# --- Manual operations ----------------------------------------------------------------


def recompute_next_run(endpoint: Endpoint, *, now: datetime) -> Plan:
    """Plan through the governor now and store it (after creating or editing an endpoint)."""
    plan = plan_next_run(now, EndpointSchedule.from_endpoint(endpoint))
    _store_plan(endpoint, plan)
    return plan


def save_endpoint(
    endpoint: Endpoint, *, now: datetime, changed: Sequence[str] | None, schedule_changed: bool
) -> None:
    """Save an endpoint its form validated (the admin, the API): a new one whole
    (``changed`` None), an existing one only in the fields the person changed, since
    the scheduler writes the state fields meanwhile. A new endpoint, or one whose
    schedule changed, is planned as an edit (``replan_after_edit``)."""
    if changed is None:
        endpoint.save()
    elif changed:
        endpoint.save(update_fields=[*changed, "updated_at"])
    if changed is None or schedule_changed:
        replan_after_edit(endpoint, now=now)


def replan_after_edit(endpoint: Endpoint, *, now: datetime) -> Plan:
    """Plan and store the next run after the endpoint was created or its schedule edited
    (interval, cron, time zone, min, max): start-to-start from its last run, or now if
    that has passed (``governor.plan_after_edit``). Every interface that saves such an
    edit calls this after ``Endpoint.save``."""
    plan = plan_after_edit(now, endpoint.last_run_at, EndpointSchedule.from_endpoint(endpoint))
    _store_plan(endpoint, plan)
    return plan


def _store_plan(endpoint: Endpoint, plan: Plan) -> None:
    """Store the plan in the endpoint's slot; an archived endpoint's slot gets no next run."""
    at, source = (None, "") if endpoint.archived_at else (plan.next_run_at, plan.source)
    Slot.objects.filter(pk=endpoint.pk).update(next_run_at=at, next_run_source=source)
    endpoint.next_run_at, endpoint.next_run_source = at, source


def _nudge_earlier(endpoint: Endpoint, now: datetime) -> Plan:
    """A hint may bring the next run forward, never push an already planned run back;
    the new cadence takes over from that run on."""
    plan = plan_next_run(now, EndpointSchedule.from_endpoint(endpoint))
    current = endpoint.next_run_at
    if current is not None and current <= plan.next_run_at:
        return Plan(current, endpoint.next_run_source)
    _store_plan(endpoint, plan)
    return plan


def _history(
    endpoint: Endpoint, kind: str, *, now: datetime, user: Any, session: Any, **values: Any
) -> HintHistory:
    return HintHistory.objects.create(
        endpoint=endpoint,
        kind=kind,
        created_at=now,
        created_by=user if getattr(user, "pk", None) else None,
        session=session,
        **values,
    )


def _refuse_bad_reason(reason: str) -> None:
    # A reason is stored as given (hint history, pause reason): NUL would stop PostgreSQL.
    if problem := reason_problem(reason):
        raise OperationRefused(problem)


def _refuse_archived(endpoint: Endpoint, action: str) -> None:
    if endpoint.archived_at is not None:
        raise OperationRefused(
            f"{endpoint} is archived, so it cannot {action}; archived endpoints never run."
        )


def run_now(endpoint: Endpoint, *, now: datetime, user: Any = None) -> None:
    """Make the endpoint due now, so the next tick runs it through the normal path."""
    _refuse_archived(endpoint, "run")
    if endpoint.job.status != JobStatus.ACTIVE:
        raise OperationRefused(
            f"Job {endpoint.job.name} is {endpoint.job.status}; resume the job first, "
            "or use Test to call the endpoint once without scheduling."
        )
    if endpoint.is_paused(now):
        raise OperationRefused(
            f"{endpoint} is paused until {endpoint.paused_until:%Y-%m-%d %H:%M:%S} UTC; "
            "resume it first, or use Test to call it once while paused."
        )
    # A lease that has run out (its worker died) does not block: it is released here.
    lease_free = Q(claim_token__isnull=True) | Q(locked_until__lte=now)
    updated = Slot.objects.filter(lease_free, pk=endpoint.pk).update(
        next_run_at=now, next_run_source=Source.MANUAL, claim_token=None, locked_until=None
    )
    if not updated:
        raise OperationRefused(_in_flight_message(endpoint, now))
    endpoint.next_run_at, endpoint.next_run_source = now, Source.MANUAL
    _log(logging.INFO, f"run now requested by {user or 'system'}", endpoint_id=endpoint.pk)


def _in_flight_message(endpoint: Endpoint, now: datetime) -> str:
    running = (
        Run.objects.filter(endpoint_id=endpoint.pk, status=RunStatus.RUNNING)
        .order_by("-started_at")
        .first()
    )
    if running is None:
        return f"{endpoint} is claimed and about to run; wait for that run to finish."
    started = describe_delta(running.started_at - now)
    return f"{endpoint} is running now (run {running.pk} started {started}); wait for it to finish."


def test_endpoint(endpoint: Endpoint, *, now: datetime | None = None) -> Run:
    """Call the endpoint once now and record a ``test`` run; the schedule is untouched.

    Allowed while paused (that is when people check an endpoint by hand).
    """
    _refuse_archived(endpoint, "be tested")
    started = now or timezone.now()
    run = Run.objects.create(
        endpoint=endpoint,
        trigger=RunTrigger.TEST,
        source=Source.MANUAL,
        scheduled_for=started,
        started_at=started,
        request_method=endpoint.method,
        request_url=strip_userinfo(endpoint.url),
    )
    tenant = endpoint.job.tenant
    result = perform_request(
        _request_for(endpoint, tenant.hmac_secret, tenant.hmac_secret_previous)
    )
    finished = started + timedelta(milliseconds=max(int(result.duration_ms), 0))
    Run.objects.filter(pk=run.pk).update(
        status=RESULT_STATUS.get(result.status, RunStatus.FAILURE),
        finished_at=max(finished, timezone.now()) if now is None else finished,
        duration_ms=max(int(result.duration_ms), 0),
        status_code=result.status_code,
        response_body=result.body,
        response_truncated=result.truncated,
        response_size_bytes=result.size_bytes,
        response_headers=result.headers or None,
        error=result.error or "",
    )
    run.refresh_from_db()
    metrics.record_run(run, status=run.status, duration_ms=run.duration_ms)
    return run


# Its name starts with "test": tell pytest it is not a test when a test module imports it.
test_endpoint.__test__ = False  # type: ignore[attr-defined]


def pause_endpoint(
    endpoint: Endpoint,
    *,
    now: datetime,
    until: datetime | None,
    reason: str = "",
    user: Any = None,
    session: Any = None,
) -> HintHistory:
    """Pause until ``until`` (None resumes). The next run moves to the end of the pause."""
    _refuse_bad_reason(reason)
    if until is None:
        return resume_endpoint(endpoint, now=now, reason=reason, user=user, session=session)
    if until <= now:
        raise OperationRefused(
            f"Cannot pause until {until.isoformat()}: that is not in the future. "
            "Pick a later time, or resume instead."
        )
    _refuse_archived(endpoint, "be paused")
    Endpoint.objects.filter(pk=endpoint.pk).update(paused_until=until, pause_reason=reason)
    endpoint.paused_until, endpoint.pause_reason = until, reason
    recompute_next_run(endpoint, now=now)
    return _history(
        endpoint,
        HintKind.PAUSE,
        now=now,
        user=user,
        session=session,
        paused_until=until,
        reason=reason,
    )


def resume_endpoint(
    endpoint: Endpoint, *, now: datetime, reason: str = "", user: Any = None, session: Any = None
) -> HintHistory:
    _refuse_bad_reason(reason)
    Endpoint.objects.filter(pk=endpoint.pk).update(paused_until=None, pause_reason="")
    endpoint.paused_until, endpoint.pause_reason = None, ""
    recompute_next_run(endpoint, now=now)
    return _history(endpoint, HintKind.RESUME, now=now, user=user, session=session, reason=reason)


def apply_hint(
    endpoint: Endpoint,
    *,
    now: datetime,
    interval_ms: int | None = None,
    next_run_at: datetime | None = None,
    ttl: timedelta,
    reason: str,
    user: Any = None,
    session: Any = None,
) -> HintHistory:
    """Set the endpoint's active hint (one TTL covers both kinds) and nudge its next run.

    The nudge only brings the next run forward: a relaxed interval applies from the next
    run on, a tighter one or an earlier one-shot takes effect at once.
    """
    _validate_hint(interval_ms, next_run_at, ttl)
    _refuse_bad_reason(reason)
    _refuse_archived(endpoint, "take hints")
    values: dict[str, Any] = {"ai_hint_expires_at": now + ttl, "ai_hint_reason": reason}
    if interval_ms is not None:
        values["ai_hint_interval_ms"] = interval_ms
    else:
        values["ai_hint_next_run_at"] = next_run_at
    Endpoint.objects.filter(pk=endpoint.pk).update(**values)
    for name, value in values.items():
        setattr(endpoint, name, value)
    _nudge_earlier(endpoint, now)
    return _history(
        endpoint,
        HintKind.INTERVAL if interval_ms is not None else HintKind.ONESHOT,
        now=now,
        user=user,
        session=session,
        interval_ms=interval_ms,
        next_run_at=next_run_at,
        expires_at=now + ttl,
        reason=reason,
    )


def _validate_hint(interval_ms: int | None, next_run_at: datetime | None, ttl: timedelta) -> None:
    if (interval_ms is None) == (next_run_at is None):
        raise OperationRefused(
            "Give exactly one of interval_ms (a new cadence) or next_run_at (a one-shot time)."
        )
    if interval_ms is not None and interval_ms < 1_000:
        raise OperationRefused(f"A hinted interval must be at least 1000 ms; got {interval_ms}.")
    if ttl <= timedelta(0):
        raise OperationRefused(f"A hint needs a positive time to live; got {ttl}.")


def clear_hints(
    endpoint: Endpoint, *, now: datetime, reason: str = "", user: Any = None, session: Any = None
) -> HintHistory:
    """Drop the active hints and plan from the baseline again (a pending one-shot is cancelled)."""
    _refuse_bad_reason(reason)
    Endpoint.objects.filter(pk=endpoint.pk).update(**NO_HINT)
    for name, value in NO_HINT.items():
        setattr(endpoint, name, value)
    recompute_next_run(endpoint, now=now)
    return _history(endpoint, HintKind.CLEAR, now=now, user=user, session=session, reason=reason)


def reset_failures(endpoint: Endpoint, *, now: datetime, user: Any = None) -> None:
    """Forget the failure streak, which also drops its backoff from the next run."""
    Endpoint.objects.filter(pk=endpoint.pk).update(failure_count=0)
    endpoint.failure_count = 0
    _nudge_earlier(endpoint, now)
    _log(logging.INFO, f"failures reset by {user or 'system'}", endpoint_id=endpoint.pk)


def rotate_signing_secret(tenant: Tenant, *, now: datetime, grace: timedelta | None = None) -> str:
    """Give the tenant a new request-signing secret and return it (shown once).

    The secret it replaces keeps signing beside the new one (two signatures in
    ``X-Cronicorn-Signature``) for ``grace`` (``CRONICORN_SIGNING_GRACE_SECONDS`` by
    default), so receivers can switch to the new secret at any time within it; then
    ``end_signing_grace`` drops it. A tenant that signed nothing starts signing now.
    """
    grace = (
        grace if grace is not None else timedelta(seconds=settings.CRONICORN_SIGNING_GRACE_SECONDS)
    )
    new = secrets.token_urlsafe(32)
    with transaction.atomic():
        current = Tenant.objects.select_for_update().get(pk=tenant.pk)
        previous = current.hmac_secret
        Tenant.objects.filter(pk=tenant.pk).update(
            hmac_secret=new,
            hmac_secret_previous=previous,
            hmac_previous_until=now + grace if previous else None,
        )
    tenant.refresh_from_db(fields=["hmac_secret", "hmac_secret_previous", "hmac_previous_until"])
    _log(logging.INFO, f"signing secret of tenant {tenant.pk} rotated (the secret is not logged)")
    return new


def end_signing_grace(*, now: datetime) -> int:
    """Drop the previous signing secrets whose grace period is over (maintenance)."""
    return Tenant.objects.filter(hmac_previous_until__lte=now).update(
        hmac_secret_previous="", hmac_previous_until=None
    )


def archive_endpoint(endpoint: Endpoint, *, now: datetime, user: Any = None) -> None:
    """Archive: never claimed again (its slot has no next run). A run already in flight
    finishes and is kept; its reschedule leaves the slot without a next run."""
    with transaction.atomic():
        Endpoint.objects.filter(pk=endpoint.pk, archived_at__isnull=True).update(archived_at=now)
        Slot.objects.filter(pk=endpoint.pk).update(next_run_at=None, next_run_source="")
    if endpoint.archived_at is None:
        endpoint.archived_at = now
    endpoint.next_run_at, endpoint.next_run_source = None, ""
    _log(logging.INFO, f"archived by {user or 'system'}", endpoint_id=endpoint.pk)


def pause_job(job: Job, *, now: datetime, user: Any = None) -> None:
    """Stop claiming the job's endpoints; their next runs stay planned for display.

    The claim joins the job and skips it. A paused job's overdue endpoints stay in the
    claim index and are read (and skipped) by each tick: fine for the few endpoints a
    job has; resume_job plans them afresh.
    """
    if job.status == JobStatus.ARCHIVED:
        raise OperationRefused(f"Job {job.name} is archived; archived jobs cannot be paused.")
    Job.objects.filter(pk=job.pk).update(status=JobStatus.PAUSED, updated_at=now)
    job.status = JobStatus.PAUSED
    _log(logging.INFO, f"job {job.pk} paused by {user or 'system'}")


def resume_job(job: Job, *, now: datetime, user: Any = None) -> None:
    if job.status == JobStatus.ARCHIVED:
        raise OperationRefused(f"Job {job.name} is archived; archived jobs cannot be resumed.")
    Job.objects.filter(pk=job.pk).update(status=JobStatus.ACTIVE, updated_at=now)
    job.status = JobStatus.ACTIVE
    for endpoint in Endpoint.objects.live().filter(job=job).select_related("job__tenant"):
        recompute_next_run(endpoint, now=now)
    _log(logging.INFO, f"job {job.pk} resumed by {user or 'system'}")


# --- Health ---------------------------------------------------------------------------


def scheduler_health(*, now: datetime) -> dict[str, Any]:
    """Numbers for scheduler_status, the dashboard and /readyz.

    Keys: last_tick_at, last_tick_age_seconds (None before the first tick), due_backlog
    (claimable endpoints already due), in_flight (running runs), lateness_p50_ms and
    lateness_p95_ms (scheduled and retry runs started in the last hour, the latest
    10 000 at most, catch-up runs left out), catchup_runs_last_hour and
    catchup_max_late_ms (runs that started more than ``CATCHUP_AFTER`` late: after
    downtime each overdue endpoint runs once, which says nothing of the scheduler's
    punctuality), runs_last_hour, failures_last_hour, zombies, and whether the fleet
    keeps up (see ``fleet_behind``).
    """
    beat = Heartbeat.objects.filter(name="tick").first()
    hour_ago = now - timedelta(hours=1)
    recent = Run.objects.filter(started_at__gte=hour_ago, started_at__lte=now)
    return {
        "last_tick_at": beat.at if beat else None,
        "last_tick_age_seconds": (now - beat.at).total_seconds() if beat else None,
        "due_backlog": Slot.objects.overdue(now).count(),
        **fleet_behind(now=now),
        "in_flight": Run.objects.filter(status=RunStatus.RUNNING).count(),
        **lateness_stats(recent),
        "runs_last_hour": recent.count(),
        "failures_last_hour": recent.filter(
            status__in=[RunStatus.FAILURE, RunStatus.TIMEOUT, RunStatus.LOST]
        ).count(),
        "zombies": Run.objects.stale(now=now).count(),
    }


def fleet_behind(*, now: datetime) -> dict[str, Any]:
    """Is the fleet keeping up? It is behind when, over the last minute, the p95 of
    scheduled runs' start lateness exceeds ``CRONICORN_BEHIND_SECONDS``, or an endpoint
    has waited longer than that, due and unclaimed (the ticks cannot claim it: a slow or
    dead tick). Jobs with ``max_concurrent`` are left out of the second test: their
    endpoints wait for a free place by design.

    Keys: oldest_due_seconds, lateness_recent_p95_ms, behind_seconds (the larger of the
    two, in seconds), fleet_behind (bool) and behind_warning (what to do, or "").
    """
    oldest = (
        Slot.objects.overdue(now)
        .filter(job__max_concurrent__isnull=True)
        .order_by("next_run_at")
        .values_list("next_run_at", flat=True)
        .first()
    )
    oldest_due = max((now - oldest).total_seconds(), 0.0) if oldest else 0.0
    minute = Run.objects.filter(started_at__gte=now - timedelta(minutes=1), started_at__lte=now)
    recent_p95 = _percentile(_lateness_sample(minute, triggers=[RunTrigger.SCHEDULED]), 0.95)
    behind = max(oldest_due, (recent_p95 or 0.0) / 1000)
    limit = settings.CRONICORN_BEHIND_SECONDS
    warning = ""
    if behind > limit:
        warning = (
            f"The fleet is behind by {behind:.1f} s: p95 start lateness over the last minute "
            f"{(recent_p95 or 0) / 1000:.1f} s, oldest unclaimed due endpoint {oldest_due:.1f} s "
            f"overdue (limit CRONICORN_BEHIND_SECONDS={limit:g}). Add execute workers or "
            "raise CRONICORN_MAX_IN_FLIGHT; if the backlog grows while runs are on time, "
            "the ticks are too slow."
        )
    return {
        "oldest_due_seconds": round(oldest_due, 1),
        "lateness_recent_p95_ms": recent_p95,
        "behind_seconds": round(behind, 1),
        "fleet_behind": bool(warning),
        "behind_warning": warning,
    }


def minute_summary(*, now: datetime) -> dict[str, Any]:
    """runscheduler's summary line: runs, failures and lateness p95 over the last minute."""
    recent = Run.objects.filter(started_at__gte=now - timedelta(minutes=1), started_at__lte=now)
    return {
        "runs": recent.count(),
        "failures": recent.filter(
            status__in=[RunStatus.FAILURE, RunStatus.TIMEOUT, RunStatus.LOST]
        ).count(),
        "lateness_p95_ms": lateness_stats(recent)["lateness_p95_ms"],
    }


def lateness_stats(runs: Any) -> dict[str, Any]:
    """Lateness p50/p95 of these runs' scheduled starts, catch-up runs counted apart."""
    ordered = _lateness_sample(runs)
    limit = CATCHUP_AFTER.total_seconds() * 1000
    punctual = [ms for ms in ordered if ms <= limit]
    catchup = [ms for ms in ordered if ms > limit]
    return {
        "lateness_p50_ms": _percentile(punctual, 0.50),
        "lateness_p95_ms": _percentile(punctual, 0.95),
        "catchup_runs_last_hour": len(catchup),
        "catchup_max_late_ms": round(catchup[-1], 1) if catchup else None,
    }


def _lateness_sample(recent: Any, triggers: Sequence[str] = ()) -> list[float]:
    rows = (
        recent.filter(trigger__in=triggers or [RunTrigger.SCHEDULED, RunTrigger.RETRY])
        .order_by("-started_at")
        .values_list("started_at", "scheduled_for")[:HEALTH_LATENESS_SAMPLE]
    )
    return sorted(max((s - d).total_seconds() * 1000, 0.0) for s, d in rows)


def _percentile(ordered: list[float], fraction: float) -> float | None:
    if not ordered:
        return None
    index = min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))
    return round(ordered[index], 1)
