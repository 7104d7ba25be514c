"""Backfill: run the past slots of a range once each (issue 33).

After an outage longer than the catch-up window, or once a bug in the target is fixed, a
person asks for the slots of 02:00-06:00 last night: each slot of the range, by the
endpoint's schedule and run policy, that has no successful run gets one run (trigger
``backfill``, ``scheduled_for`` the slot), paced at ``rate`` runs a second.

This module owns what a backfill is: its slots (``slots_between``), what each would do
(``plan_backfill``, the dry run), and its operations (``start_backfill``,
``cancel_backfill``, ``backfill_progress``). Every interface (command, API, MCP, admin)
calls these. The runs themselves are started by the paced loop in
``endpoints.engine.backfilling`` (``runscheduler`` and the Celery task), which decides
each slot again, under a lock, with ``slot_verdict``.

"Never a slot twice" (docs/DESIGN.md, "Backfill"): a slot is run by a backfill only when
it has no successful run, no run in flight, no retry the scheduler still owes it, and is
before the endpoint's live next run (the scheduler's own slot); and the database holds at
most one backfill run per slot and attempt (``endpoints_run_one_backfill_per_slot``), the
attempt being one more than the slot's earlier, failed, backfill runs.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypedDict
from zoneinfo import ZoneInfo

from cronsim import CronSim
from django.db import transaction
from django.db.models import Count, Q
from django.utils import timezone

from endpoints.backfill_models import Backfill, BackfillSlot
from endpoints.choices import BackfillSlotState, BackfillStatus, JobStatus, RunTrigger
from endpoints.engine.backfilling import live_of, runs_of_slots, slot_verdict
from endpoints.models import Endpoint, Job, Run
from endpoints.operations import OperationRefused
from endpoints.policies import RunPolicy, jitter_offset_ms
from endpoints.schedules import normalize_cron
from endpoints.windows import free_week, is_free

# The most slots one backfill may hold: a bigger range is refused with where to cut it.
MAX_SLOTS = 10_000
DEFAULT_RATE = 5.0
MAX_RATE = 200.0
_RATE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(?:/\s*s)?\s*\Z")
UTC = ZoneInfo("UTC")


def parse_rate(text: str | float) -> float:
    """``5/s``, ``5`` or ``0.5/s``: runs a second, within (0, ``MAX_RATE``]."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        rate = float(text)
    else:
        match = _RATE.match(str(text))
        if match is None:
            raise OperationRefused(
                f"{text!r} is not a rate; write runs a second, e.g. 5/s or 0.5/s."
            )
        rate = float(match.group(1))
    if not (0 < rate <= MAX_RATE) or math.isnan(rate):
        raise OperationRefused(
            f"A backfill's rate is more than 0 and at most {MAX_RATE:g} runs a second "
            f"(got {rate:g}); e.g. 5/s."
        )
    return rate


def slots_between(
    endpoint: Endpoint, start: datetime, end: datetime, *, limit: int = MAX_SLOTS + 1
) -> list[datetime]:
    """The endpoint's slots in ``[start, end)``, earliest first, at most ``limit``.

    Cron: its occurrences in its time zone (DST as the governor plans them: a skipped
    wall time once at the gap's end, a repeated one once, at its first pass), each plus
    the endpoint's jitter offset, as its scheduled runs have them. Interval: on the phase
    of its last scheduled run (else its next run, else the range's start), as the engine
    keeps it. A one-off policy: its one time. Then the run policy: only slots within its
    active period, outside its blackouts and inside its allowed windows (a slot the
    scheduler would have moved to a window's opening is not a slot of the range)."""
    policy = endpoint.policy
    if policy.run_once_at is not None:
        raw: Iterable[datetime] = [policy.run_once_at] if start <= policy.run_once_at < end else []
    elif endpoint.baseline_cron:
        raw = _cron_slots(endpoint, start, end)
    else:
        raw = _interval_slots(endpoint, start, end)
    keep = _policy_filter(policy, endpoint.timezone or "UTC")
    found: list[datetime] = []
    for at in raw:
        if keep(at):
            found.append(at)
            if len(found) >= limit:
                break
    return found


def _cron_slots(endpoint: Endpoint, start: datetime, end: datetime) -> Iterable[datetime]:
    zone = ZoneInfo(endpoint.timezone or "UTC")
    offset = timedelta(milliseconds=jitter_offset_ms(endpoint.pk, endpoint.policy.jitter_ms))
    after = start - offset - timedelta(microseconds=1)
    previous = after
    # As ``schedules.next_cron_after``: cronsim may yield a fold's hour twice; the second
    # pass (not after the first in UTC) is skipped, so a fixed wall time runs once.
    for occurrence in CronSim(normalize_cron(endpoint.baseline_cron), after.astimezone(zone)):
        at = occurrence.astimezone(UTC)
        if at <= previous:
            continue
        if at + offset >= end:
            return
        previous = at
        yield at + offset


def _interval_slots(endpoint: Endpoint, start: datetime, end: datetime) -> Iterable[datetime]:
    interval = timedelta(milliseconds=endpoint.baseline_interval_ms or 0)
    if interval <= timedelta(0):
        return
    anchor = (
        Run.objects.filter(endpoint_id=endpoint.pk, trigger=RunTrigger.SCHEDULED)
        .order_by("-scheduled_for")
        .values_list("scheduled_for", flat=True)
        .first()
    ) or getattr(getattr(endpoint, "slot", None), "next_run_at", None)
    anchor = anchor or start
    at = anchor + math.ceil((start - anchor) / interval) * interval
    while at < end:
        yield at
        at += interval


def _policy_filter(policy: RunPolicy, tz_name: str) -> Any:
    zone = ZoneInfo(tz_name)
    free = free_week(policy.allowed, policy.blackout) if policy.allowed or policy.blackout else None

    def keep(at: datetime) -> bool:
        if policy.active_from is not None and at < policy.active_from:
            return False
        if policy.active_until is not None and at > policy.active_until:
            return False
        return free is None or is_free(at, zone, free)

    return keep


@dataclass
class PlannedSlot:
    endpoint: Endpoint
    scheduled_for: datetime
    note: str  # why it is not run; "" when it is

    @property
    def runs(self) -> bool:
        return not self.note


@dataclass
class BackfillPlan:
    start: datetime
    end: datetime
    rate: float
    endpoints: list[Endpoint]
    slots: list[PlannedSlot] = field(default_factory=list)

    @property
    def to_run(self) -> int:
        return sum(1 for slot in self.slots if slot.runs)

    @property
    def seconds(self) -> float:
        """How long its runs take to start, at its rate."""
        return self.to_run / self.rate


def plan_backfill(
    *,
    endpoint: Endpoint | None = None,
    job: Job | None = None,
    start: datetime,
    end: datetime,
    rate: float | str = DEFAULT_RATE,
    now: datetime | None = None,
) -> BackfillPlan:
    """The slots a backfill of the range would hold and what each would do; nothing is
    written (the dry run, the admin's confirmation). Refuses, in words, a range that is
    empty, reversed, in the future or over ``MAX_SLOTS`` slots, and what cannot run."""
    now = now or timezone.now()
    rate = parse_rate(rate)
    _refuse_range(start, end, now)
    endpoints = _endpoints_of(endpoint, job)
    plan = BackfillPlan(start, end, rate, endpoints)
    left = MAX_SLOTS
    for each in endpoints:
        slots = slots_between(each, start, end, limit=left + 1)
        if len(slots) > left:
            raise OperationRefused(_too_many(each, start, end, slots, left))
        left -= len(slots)
        live = live_of([each.pk])[each.pk]  # before the runs: see slot_verdict
        runs = runs_of_slots(each.pk, slots)
        plan.slots += [PlannedSlot(each, at, slot_verdict(at, runs.get(at), live)) for at in slots]
    plan.slots.sort(key=lambda s: (s.scheduled_for, s.endpoint.pk))
    return plan


def _refuse_range(start: datetime, end: datetime, now: datetime) -> None:
    if start >= end:
        raise OperationRefused(
            f"The range is empty: --from ({_iso(start)}) must be before --to ({_iso(end)})."
        )
    if end > now:
        raise OperationRefused(
            f"The range ends at {_iso(end)}, in the future: a backfill runs past slots only; "
            f"end it at or before now ({_iso(now)}). The scheduler runs the slots to come."
        )


def _too_many(
    endpoint: Endpoint, start: datetime, end: datetime, slots: list[datetime], left: int
) -> str:
    cut = slots[left - 1] if left > 0 else start
    alone = "" if left == MAX_SLOTS else " with the slots of the endpoints before it"
    return (
        f"The range {_iso(start)} to {_iso(end)} holds more than {MAX_SLOTS:,} slots "
        f"(at {endpoint.ref}'s schedule{alone}); a backfill holds at most {MAX_SLOTS:,}. "
        f"Split it: e.g. --to {_iso(cut + timedelta(seconds=1))} first, then from there."
    ).replace(",", " ")


def _endpoints_of(endpoint: Endpoint | None, job: Job | None) -> list[Endpoint]:
    if (endpoint is None) == (job is None):
        raise OperationRefused("Backfill one endpoint or one job: give exactly one of them.")
    if endpoint is not None:
        job = endpoint.job
        if endpoint.archived_at is not None:
            raise OperationRefused(
                f"{endpoint.ref} is archived: it runs nothing. Unarchive its job first."
            )
    assert job is not None
    if job.status == JobStatus.ARCHIVED:
        raise OperationRefused(f"Job {job.name} is archived: it runs nothing.")
    if endpoint is not None:
        return [endpoint]
    found = list(
        Endpoint.objects.filter(job=job, archived_at__isnull=True)
        .select_related("job__tenant", "slot")
        .order_by("pk")
    )
    if not found:
        raise OperationRefused(f"Job {job.name} has no endpoint to backfill.")
    return found


def start_backfill(
    *,
    endpoint: Endpoint | None = None,
    job: Job | None = None,
    start: datetime,
    end: datetime,
    rate: float | str = DEFAULT_RATE,
    requested_by: str = "",
    now: datetime | None = None,
) -> Backfill:
    """Record a backfill of the range and its slots (those that would run now; each is
    decided again when its turn comes). The paced loop starts it within a second."""
    now = now or timezone.now()
    plan = plan_backfill(endpoint=endpoint, job=job, start=start, end=end, rate=rate, now=now)
    slots = [slot for slot in plan.slots if slot.runs]
    with transaction.atomic():
        backfill = Backfill.objects.create(
            endpoint=endpoint,
            job=job,
            range_from=start,
            range_to=end,
            rate=plan.rate,
            status=BackfillStatus.QUEUED if slots else BackfillStatus.DONE,
            requested_by=requested_by[:200],
            created_at=now,
            finished_at=None if slots else now,
            paced_until=now,
            total=len(slots),
        )
        BackfillSlot.objects.bulk_create(
            [
                BackfillSlot(
                    backfill=backfill, endpoint=slot.endpoint, scheduled_for=slot.scheduled_for
                )
                for slot in slots
            ],
            batch_size=1000,
        )
    return backfill


def cancel_backfill(backfill: Backfill, *, now: datetime | None = None) -> Backfill:
    """Stop starting the backfill's runs; those in flight finish and are recorded."""
    now = now or timezone.now()
    updated = Backfill.objects.filter(
        pk=backfill.pk, status__in=[BackfillStatus.QUEUED, BackfillStatus.RUNNING]
    ).update(status=BackfillStatus.CANCELLED, finished_at=now)
    backfill.refresh_from_db()
    if not updated:
        raise OperationRefused(
            f"Backfill {backfill.pk} is {backfill.status} already; nothing to cancel."
        )
    return backfill


class BackfillProgress(TypedDict):
    id: int
    endpoint: str | None
    job: str | None
    range_from: datetime
    range_to: datetime
    rate: float
    status: str
    requested_by: str
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    total: int
    pending: int
    started: int
    succeeded: int
    failed: int
    skipped: int


def backfill_progress(backfill: Backfill) -> BackfillProgress:
    """Where the backfill is: its slots by state, in one query."""
    counts = BackfillSlot.objects.filter(backfill=backfill).aggregate(
        **{state.value: Count("pk", filter=Q(state=state.value)) for state in BackfillSlotState}
    )
    endpoint = (
        Endpoint.objects.filter(pk=backfill.endpoint_id).select_related("job").first()
        if backfill.endpoint_id is not None
        else None
    )
    job = (
        Job.objects.filter(pk=backfill.job_id).values_list("name", flat=True).first()
        if backfill.job_id is not None
        else None
    )
    return {
        "id": backfill.pk,
        "endpoint": endpoint.ref if endpoint is not None else None,
        "job": job,
        "range_from": backfill.range_from,
        "range_to": backfill.range_to,
        "rate": backfill.rate,
        "status": backfill.status,
        "requested_by": backfill.requested_by,
        "created_at": backfill.created_at,
        "started_at": backfill.started_at,
        "finished_at": backfill.finished_at,
        "total": backfill.total,
        "pending": counts[BackfillSlotState.PENDING.value],
        "started": counts[BackfillSlotState.STARTED.value],
        "succeeded": counts[BackfillSlotState.SUCCEEDED.value],
        "failed": counts[BackfillSlotState.FAILED.value],
        "skipped": counts[BackfillSlotState.SKIPPED.value],
    }


def progress_words(progress: BackfillProgress) -> str:
    """One line: ``backfill 3 of billing/queue (running): 12 of 38 run, 11 succeeded, …``."""
    what = progress["endpoint"] or f"job {progress['job']}"
    done = progress["succeeded"] + progress["failed"]
    return (
        f"Backfill {progress['id']} of {what} ({progress['status']}): {done} of "
        f"{progress['total']} run, {progress['succeeded']} succeeded, {progress['failed']} "
        f"failed, {progress['started']} in flight, {progress['pending']} to start, "
        f"{progress['skipped']} skipped; at {progress['rate']:g}/s."
    )


def _iso(at: datetime) -> str:
    return at.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
