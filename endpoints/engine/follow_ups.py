"""Follow-ups after a run (run policy ``follow_ups``): once a run's outcome is recorded
(its reschedule committed), each endpoint its policy names for that outcome is made due
now, through the normal claim, as a run now is (``operations.run_now``): its slot's next
run ``now`` with the source ``follow-up``, only while the slot's lease is free and no run
now or other follow-up is waiting there, and the cause noted on the endpoint
(``follow_up_of_run``), which its run copies (``Run.caused_by``, trigger ``follow-up``).

So each triggering run makes at most one run of each follow-up: a redelivered claim
starts no second run (DESIGN "Redelivery is a no-op"), so records no second outcome, and
a follow-up that cannot be made now (its endpoint in flight, paused, its job not active,
a run now or another follow-up already waiting) is recorded on that endpoint as a
``skipped`` run saying why, never queued behind it nor merged into another. A worker
killed between the outcome's commit and this write loses the follow-up, as it would the
breaker's opening: never doubled. Names were checked when saved
(``endpoints.follow_ups``); one renamed or archived since is logged, not run.
"""

from __future__ import annotations

import logging
from datetime import datetime
from functools import reduce
from operator import or_

from django.db import transaction
from django.db.models import Q

from endpoints.engine.logs import log_event
from endpoints.models import Endpoint, JobStatus, Run, RunStatus, RunTrigger, Slot, Source
from endpoints.policies import FollowUp


def start_follow_ups(
    *, endpoint_id: int, run_id: int, rules: tuple[FollowUp, ...], succeeded: bool, now: datetime
) -> None:
    """Make due now each endpoint of ``rules`` wanted after this outcome of run ``run_id``."""
    wanted = [rule.endpoint for rule in rules if rule.wanted(succeeded)]
    if not wanted:
        return
    cause = Endpoint.objects.filter(pk=endpoint_id).values_list(
        "job__tenant_id", "job__name", "name"
    )
    found = cause.first()
    if found is None:
        return
    tenant_id, job_name, name = found
    named = reduce(or_, (Q(job__name=ref.split("/")[0], name=ref.split("/")[1]) for ref in wanted))
    targets = {
        f"{job}/{target}": (pk, paused_until, status)
        for pk, job, target, paused_until, status in Endpoint.objects.live()
        .filter(named, job__tenant_id=tenant_id)
        .values_list("pk", "job__name", "name", "paused_until", "job__status")
    }
    for ref in wanted:
        if ref not in targets:
            log_event(
                logging.WARNING,
                f"follow-up {ref} of run {run_id} not run: no live endpoint of that name",
                endpoint_id=endpoint_id,
            )
            continue
        pk, paused_until, status = targets[ref]
        why = ""
        if status != JobStatus.ACTIVE:
            why = f"its job is {status}"
        elif paused_until is not None and paused_until > now:
            why = f"it is paused until {paused_until:%Y-%m-%d %H:%M:%S} UTC"
        elif not _make_due(pk, run_id, now):
            why = (
                "its own run was claimed or in flight, or a run now or another follow-up "
                "was waiting"
            )
        if why:
            _record_skipped(
                pk, run_id, now, f"Follow-up of run {run_id} ({job_name}/{name}) not run: {why}."
            )
        else:
            log_event(logging.INFO, f"follow-up {ref} due now, after run {run_id}", endpoint_id=pk)


def _make_due(endpoint_id: int, run_id: int, now: datetime) -> bool:
    lease_free = Q(claim_token__isnull=True) | Q(locked_until__lte=now)
    with transaction.atomic():
        made = (
            Slot.objects.filter(lease_free, pk=endpoint_id)
            .exclude(next_run_source__in=[Source.MANUAL, Source.FOLLOW_UP])
            .update(
                next_run_at=now,
                next_run_source=Source.FOLLOW_UP,
                claim_token=None,
                locked_until=None,
            )
        )
        if made:
            Endpoint.objects.filter(pk=endpoint_id).update(follow_up_of_run=run_id)
    return bool(made)


def _record_skipped(endpoint_id: int, run_id: int, now: datetime, error: str) -> None:
    Run.objects.create(
        endpoint_id=endpoint_id,
        trigger=RunTrigger.FOLLOW_UP,
        source=Source.FOLLOW_UP,
        scheduled_for=now,
        started_at=now,
        finished_at=now,
        duration_ms=0,
        status=RunStatus.SKIPPED,
        error=error,
        caused_by=run_id,
    )
    log_event(logging.INFO, error, endpoint_id=endpoint_id)


def cause_of(endpoint_id: int) -> int | None:
    """The run whose follow-up the endpoint's waiting run is (for ``Run.caused_by``)."""
    return (
        Endpoint.objects.filter(pk=endpoint_id).values_list("follow_up_of_run", flat=True).first()
    )
