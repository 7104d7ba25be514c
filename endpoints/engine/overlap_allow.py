"""A run policy's ``overlap: {"allow": N}``: up to N calls of an endpoint in flight at once,
each slot still run at most once. The lease is kept per slot:

- the endpoint's slot lease (``Slot.claim_token``) is held only from the claim until the
  slot's Run is recorded: in that same transaction the next run is planned from the slot
  (or from the start, when that is past the next slot) and the lease released, so the
  next slot is claimed on time while this call is in flight (``move_on``);
- from then on the slot's own lease is its Run: ``running``, with ``lease_expires_at``
  renewed by the process that holds the call, as any run's. A run whose lease expired
  unrenewed (its worker died or stalled) no longer counts as in flight, and the sweep
  marks it ``lost``; it is not retried, its slot having passed (at most once);
- a claim that comes due while N runs of the endpoint are in flight (``full``) waits
  for one of them to end, holding its claim (``dispatch``), then starts late, coalesced;
- the outcome writes the run and the endpoint's failure count alone (``record_beside``),
  never its slot: the next run and the lease belong to the later slots' claims.

Two claims of one endpoint never start at once (the slot lease is held by one claim
until its run is recorded), so the count of runs in flight that ``full`` reads cannot
grow behind it; it can only shrink, which costs a wait, never an extra call. The
default policy never comes here: the engine asks ``RunPolicy.overlap`` only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from endpoints.engine import sql
from endpoints.engine.claiming import Claim
from endpoints.engine.outcomes import Outcome, hints_after_run
from endpoints.engine.sql import ClaimedEndpoint
from endpoints.governor import EndpointSchedule, plan_next_run
from endpoints.models import Endpoint, Flip, Run, RunStatus, RunTrigger


class Full:
    """What starting a claim gives while the endpoint has its N calls in flight: the claim
    is kept and tried again shortly (``dispatch``)."""

    def __repr__(self) -> str:
        return "FULL"


FULL = Full()

# Re-planned this often when a person's edit keeps changing the endpoint meanwhile.
_TRIES = 3


def side_by_side(endpoint: ClaimedEndpoint) -> bool:
    return endpoint.policy.overlap == "allow"


def in_flight(endpoint_id: int, *, now: datetime) -> int:
    """Runs of the endpoint in flight: ``running`` under a live lease (the partial index
    ``endpoints_run_in_flight`` holds only running runs)."""
    return Run.objects.filter(
        endpoint_id=endpoint_id, status=RunStatus.RUNNING, lease_expires_at__gt=now
    ).count()


def full(endpoint: ClaimedEndpoint, *, now: datetime) -> bool:
    return in_flight(endpoint.pk, now=now) >= endpoint.policy.allow


def move_on(
    endpoint: ClaimedEndpoint, claim: Claim, started: datetime, *, hints: dict[str, Any]
) -> None:
    """Plan the run after this slot and release the slot lease, once this slot's Run is
    recorded (in its transaction). Conditional on the claim, as every reschedule is; an
    edit committed meanwhile is re-read and planned again. ``hints`` are the endpoint's
    hints after a run starting at ``started`` (``outcomes.hints_after_run``)."""
    for _try in range(_TRIES):
        values = _state_at_start(endpoint, claim, started, hints)
        if sql.reschedule_all([(endpoint, claim.claim_token, values)])[0]:
            return
        fresh = sql.load_endpoint(claim.endpoint_id)
        if fresh is None or fresh.claim_token != claim.claim_token:
            raise RuntimeError("the claim was lost before its run was recorded")
        endpoint = fresh
    raise RuntimeError("the endpoint kept changing while its run was recorded")


def _state_at_start(
    endpoint: ClaimedEndpoint, claim: Claim, started: datetime, hints: dict[str, Any]
) -> dict[str, Any]:
    schedule = replace(
        EndpointSchedule.from_endpoint(endpoint),
        **{k: v for k, v in hints.items() if k != "ai_hint_reason"},
    )
    # From the slot, so that calls a few ms late keep the schedule's own cadence; a start
    # later than the next slot plans from itself instead (coalesced, as a late run is).
    since = started
    if claim.trigger == RunTrigger.SCHEDULED:
        schedule = replace(schedule, phase_slot=claim.scheduled_for)
        since = min(claim.scheduled_for, started)
    plan = plan_next_run(since, schedule)
    if plan.next_run_at is not None and plan.next_run_at <= started:
        plan = plan_next_run(started, schedule)
    archived = endpoint.archived_at is not None
    return {
        "last_run_at": started,
        "next_run_at": None if archived else plan.next_run_at,
        "next_run_source": "" if archived else plan.source,
        "failure_count": endpoint.failure_count,
        **hints,
        "retry_attempt": 0,
        "retry_of_run": None,
    }


def start_beside(
    endpoint: ClaimedEndpoint,
    claim: Claim,
    started: datetime,
    *,
    start_run: Callable[[ClaimedEndpoint, Claim, datetime], Run | None],
) -> Run | Full | None:
    """Unless N runs are in flight, record the slot's Run (``start_run``, the engine's
    one way, which decides a redelivered claim) and, in the same transaction, plan the
    next run from this slot and release the slot lease (``move_on``)."""
    with transaction.atomic():
        if full(endpoint, now=timezone.now()):
            return FULL
        run = start_run(endpoint, claim, started)
        if run is not None:
            move_on(endpoint, claim, started, hints=hints_after_run(endpoint, started))
        return run


def record_beside(outcome: Outcome) -> dict[str, Any]:
    """After a run's outcome is written (and only if it was: its lease held), the
    endpoint's failure count: 0 after a success, one more after a failure, as it was
    after a skip; the streak's end for the alerts (``Flip``). Relative to the row as it is
    (other calls of the endpoint finish beside this one), under its lock. Returns what
    the run's line, the breaker and the follow-ups read (``after_reschedule``); nothing
    when the endpoint is gone."""
    endpoint_id, status, started = outcome.claim.endpoint_id, outcome.result.status, outcome.started
    row = (
        Endpoint.objects.select_for_update(no_key=True)
        .filter(pk=endpoint_id)
        .values_list("failure_count", flat=True)
    )
    before = row.first()
    if before is None:
        return {}
    after = {"success": 0, "skipped": before}.get(status, before + 1)
    if after != before:
        Endpoint.objects.filter(pk=endpoint_id).update(failure_count=after)
    if after == 0 and before:
        Flip.objects.create(endpoint_id=endpoint_id, failures=before, at=started)
    slot = Endpoint.objects.filter(pk=endpoint_id).values_list(
        "slot__next_run_at", "slot__next_run_source"
    )
    next_run_at, source = slot.first() or (None, "")
    return {
        "failure_count": after,
        "next_run_at": next_run_at,
        "next_run_source": source,
        "retry_attempt": 0,
    }
