"""A run policy's ``overlap: skip``: the slots of an endpoint that came due while its call
was still in flight are not run but recorded ``skipped``, each saying why, and the next
run is the first slot after the call ended (``wait``, the default, plans the next run
from the end and records nothing). One call in flight at a time either way: the lease of
the endpoint's slot is held until the run's outcome is written.

The slots are the governor's, planned one after another from the slot that came due
first (windows, calendars and clamps included), at most ``MAX_RECORDED`` of them; the
skipped rows are scheduled runs of their slots, so ``endpoints_run_one_per_slot`` keeps
each slot at most once (written again, a row is ignored), and no later claim can take a
slot already past.
"""

from __future__ import annotations

from datetime import datetime

from endpoints.governor import EndpointSchedule, Plan, plan_next_run
from endpoints.models import Run, RunStatus, RunTrigger

MAX_RECORDED = 60


def slots_in_flight(
    first: Plan, schedule: EndpointSchedule, finished: datetime
) -> tuple[Plan, list[Plan]]:
    """The next run after ``finished`` on the schedule's own slots from ``first`` (due
    before ``finished``), and the slots passed while in flight."""
    skipped: list[Plan] = []
    plan = first
    while plan.next_run_at is not None and plan.next_run_at <= finished:
        if len(skipped) >= MAX_RECORDED:
            return plan_next_run(finished, schedule), skipped
        skipped.append(plan)
        after = plan_next_run(plan.next_run_at, schedule)
        if after.next_run_at is not None and after.next_run_at <= plan.next_run_at:
            return plan_next_run(finished, schedule), skipped  # a pause's end: from the end
        plan = after
    return plan, skipped


def record_overlapped(
    endpoint_id: int, run: Run, slots: list[Plan], *, started: datetime, finished: datetime
) -> None:
    """The skipped slots as runs saying why (a slot recorded already is left as it is)."""
    why = (
        f"Skipped (run policy overlap: skip): due while run {run.pk}, the previous call, was "
        f"still in flight (started {_stamp(started)}, ended {_stamp(finished)})."
    )
    Run.objects.bulk_create(
        [
            Run(
                endpoint_id=endpoint_id,
                trigger=RunTrigger.SCHEDULED,
                source=plan.source,
                scheduled_for=plan.next_run_at,
                started_at=finished,
                finished_at=finished,
                duration_ms=0,
                status=RunStatus.SKIPPED,
                error=why,
            )
            for plan in slots
            if plan.next_run_at is not None
        ],
        ignore_conflicts=True,
    )


def _stamp(at: datetime) -> str:
    return f"{at:%Y-%m-%d %H:%M:%S}.{at.microsecond // 1000:03d} UTC"
