"""The paced loop of backfills: take the next slots of a running backfill, record each
one's Run, call it through the one HTTP executor, record its outcome.

``runscheduler`` calls ``BackfillRunner.run_once`` every tick on a thread of its own; on
Celery the ``cronicorn.backfill_cycle`` task (queue ``execute``, sent by beat every tick)
calls it in the execute worker. A pass claims, for each backfill due, the slots whose
starts fall within the next ``HORIZON`` at its rate (the backfill's row locked ``FOR
UPDATE SKIP LOCKED``, so two loops share one backfill's pace and never take the same
slot), decides each slot again (``slot_verdict``) and inserts its Run in the same
transaction; after commit each request is started on the executor's event loop at its
own time, 1/rate apart. A writer thread records the outcomes that finish together in one
transaction (the Run's columns as every run's, ``outcomes.finish_columns``, and the
slot's state).

A backfill run is no scheduled run: it takes no claim on the endpoint's slot, never
moves its next run, its failure count or its breaker, and is never retried by the
scheduler (a failed one may be backfilled again). Why a slot is never run twice:
docs/DESIGN.md, "Backfill".
"""

from __future__ import annotations

import functools
import logging
import math
import queue
import threading
import uuid
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import close_old_connections, connections, transaction
from django.utils import timezone

from endpoints.backfill_models import Backfill, BackfillSlot
from endpoints.choices import BackfillSlotState, BackfillStatus, JobStatus, RunStatus, RunTrigger
from endpoints.engine import executor, metrics, sql
from endpoints.engine.executor import HttpResult, NotSent, not_called
from endpoints.engine.logs import log_event
from endpoints.engine.outcomes import finish_columns
from endpoints.engine.running import judged, request_for
from endpoints.engine.sql import ClaimedEndpoint
from endpoints.governor import BASELINE_CRON, BASELINE_INTERVAL
from endpoints.models import Endpoint, Run, Slot
from endpoints.secrets import strip_userinfo

logger = logging.getLogger("cronicorn.scheduler")

# A pass claims the starts that fall within this much of now (a tick's worth, with room).
HORIZON = timedelta(seconds=1.5)
# Most slots one backfill starts in a pass, and most backfills a pass serves.
BATCH = 500
BACKFILLS_PER_PASS = 20
# The live schedule comes first: while the scheduled runs that started in the last
# ``LIVE_SPAN`` were late by more than ``LIVE_LATE_MS`` at their p95, a pass starts one
# slot per backfill (a trickle, so a backfill always moves on), whatever its rate.
LIVE_SPAN = timedelta(seconds=2)
LIVE_LATE_MS = 50.0
LIVE_SAMPLE = 2000
ACTIVE = (BackfillStatus.QUEUED, BackfillStatus.RUNNING)
# The outcomes that finish together are written together, after at most this wait.
WRITE_LINGER = 0.02
WRITE_BATCH = 100


@dataclass(frozen=True)
class SlotRuns:
    """What the history says of one slot of an endpoint."""

    succeeded: int | None = None  # a successful run's id
    running: int | None = None  # a run in flight's id
    backfills: int = 0  # the slot's backfill runs so far (all failed, else ``succeeded``)
    run_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class Live:
    """What the scheduler holds of an endpoint: its next run, and the run whose slot a
    planned retry (run policy) belongs to."""

    next_run_at: datetime | None
    retry_of_run: int | None


def live_of(endpoint_ids: Sequence[int]) -> dict[int, Live]:
    """The scheduler's state of each endpoint, read before its runs (see ``slot_verdict``)."""
    slots = dict(Slot.objects.filter(pk__in=endpoint_ids).values_list("pk", "next_run_at"))
    retries = dict(Endpoint.objects.filter(pk__in=endpoint_ids).values_list("pk", "retry_of_run"))
    return {pk: Live(slots.get(pk), retries.get(pk)) for pk in endpoint_ids}


def runs_of_slots(endpoint_id: int, slots: Sequence[datetime]) -> dict[datetime, SlotRuns]:
    """For each slot, its runs: of the slot itself and the retries of those (whose own
    ``scheduled_for`` is later, linked by ``retry_of``). Tests do not count."""
    if not slots:
        return {}
    rows = (
        Run.objects.filter(
            endpoint_id=endpoint_id, scheduled_for__gte=min(slots), scheduled_for__lte=max(slots)
        )
        .exclude(trigger=RunTrigger.TEST)
        .values_list("pk", "scheduled_for", "status", "trigger")
    )
    wanted = set(slots)
    by_slot: dict[datetime, list[tuple[int, str, str]]] = {}
    slot_of: dict[int, datetime] = {}
    for pk, at, status, trigger in rows:
        if at in wanted:
            by_slot.setdefault(at, []).append((pk, status, trigger))
            slot_of[pk] = at
    frontier = list(slot_of)
    while frontier:  # a retry links to the slot's first run, a lost retry's to the one before
        retries = list(
            Run.objects.filter(endpoint_id=endpoint_id, retry_of_id__in=frontier)
            .exclude(pk__in=list(slot_of))
            .values_list("pk", "retry_of_id", "status", "trigger")
        )
        frontier = []
        for pk, first, status, trigger in retries:
            slot_of[pk] = slot_of[first]
            by_slot[slot_of[first]].append((pk, status, trigger))
            frontier.append(pk)
    return {
        at: SlotRuns(
            succeeded=next((pk for pk, s, _t in runs if s == RunStatus.SUCCESS), None),
            running=next((pk for pk, s, _t in runs if s == RunStatus.RUNNING), None),
            backfills=sum(1 for _pk, _s, t in runs if t == RunTrigger.BACKFILL),
            run_ids=tuple(pk for pk, _s, _t in runs),
        )
        for at, runs in by_slot.items()
    }


def slot_verdict(at: datetime, runs: SlotRuns | None, live: Live) -> str:
    """Why the slot ``at`` is not for a backfill to run, in words; "" when it is.

    ``live`` must be read before ``runs``: the scheduler's run of its next slot is
    recorded before that slot moves on (its finish and the move are one transaction), so
    a slot either is still the endpoint's next run, or its run is in the history read
    after."""
    runs = runs or SlotRuns()
    if runs.succeeded is not None:
        return f"ran: run {runs.succeeded} succeeded"
    if runs.running is not None:
        return f"running now: run {runs.running}"
    if live.retry_of_run is not None and live.retry_of_run in runs.run_ids:
        return "the scheduler retries it (run policy)"
    if live.next_run_at is not None and at == live.next_run_at:
        return "the endpoint's next run: the scheduler runs it"
    return ""


@dataclass
class Starting:
    """A backfill run recorded, whose request is still to be sent at ``at``."""

    slot_id: int
    run: Run
    at: datetime


def live_is_late(now: datetime) -> bool:
    """Whether the live schedule is behind: the p95 start lateness of the scheduled runs
    started in the last ``LIVE_SPAN`` over ``LIVE_LATE_MS`` (served by
    ``endpoints_run_started``)."""
    late = sorted(
        (started - scheduled).total_seconds() * 1000
        for started, scheduled in Run.objects.filter(
            trigger=RunTrigger.SCHEDULED, started_at__gte=now - LIVE_SPAN, started_at__lt=now
        ).values_list("started_at", "scheduled_for")[:LIVE_SAMPLE]
    )
    return bool(late) and late[int(0.95 * (len(late) - 1))] > LIVE_LATE_MS


def claim_backfill_slots(backfill_id: int, *, now: datetime, most: int = BATCH) -> list[Starting]:
    """The next slots of one backfill, decided and their Runs recorded, in one short
    transaction; [] when it is not due (its pace), not running, or taken by another loop
    (whose pass it is). A backfill with nothing left to start is settled (``done``)."""
    with transaction.atomic():
        backfill = (
            Backfill.objects.select_for_update(skip_locked=True)
            .filter(pk=backfill_id, status__in=ACTIVE)
            .first()
        )
        if backfill is None:
            return []
        first = max(backfill.paced_until, now)
        room = (now + HORIZON - first).total_seconds()
        if room <= 0:
            return []
        wanted = min(most, max(1, math.ceil(room * backfill.rate)))
        pending = list(
            BackfillSlot.objects.filter(backfill=backfill, state=BackfillSlotState.PENDING)
            .order_by("scheduled_for", "endpoint_id")
            .values_list("pk", "endpoint_id", "scheduled_for")[:wanted]
        )
        if not pending:
            _settle(backfill, now)
            return []
        starting = _start_slots(pending, first=first, rate=backfill.rate, now=now)
        backfill.paced_until = first + timedelta(seconds=len(starting) / backfill.rate)
        values: dict[str, Any] = {"paced_until": backfill.paced_until}
        if backfill.status == BackfillStatus.QUEUED:
            values.update(status=BackfillStatus.RUNNING, started_at=now)
        Backfill.objects.filter(pk=backfill.pk).update(**values)
    return starting


def _start_slots(
    pending: Sequence[tuple[int, int, datetime]], *, first: datetime, rate: float, now: datetime
) -> list[Starting]:
    endpoint_ids = sorted({endpoint_id for _pk, endpoint_id, _at in pending})
    live = live_of(endpoint_ids)  # before the runs: see slot_verdict
    endpoints = sql.load_endpoints(endpoint_ids)
    history = {
        pk: runs_of_slots(pk, [at for _s, e, at in pending if e == pk]) for pk in endpoint_ids
    }
    chosen: list[tuple[int, dict[str, Any], datetime]] = []
    skipped: dict[str, list[int]] = {}
    for slot_id, endpoint_id, at in pending:
        endpoint = endpoints.get(endpoint_id)
        runs = history[endpoint_id].get(at)
        note = _not_runnable(endpoint, now) or slot_verdict(at, runs, live[endpoint_id])
        if note:
            skipped.setdefault(note, []).append(slot_id)
            continue
        assert endpoint is not None
        start = first + timedelta(seconds=len(chosen) / rate)
        attempt = (runs.backfills if runs else 0) + 1
        chosen.append((slot_id, _run_fields(endpoint, at, start, attempt=attempt), start))
    # One statement for the runs of the pass; a place another backfill's run holds
    # (endpoints_run_one_backfill_per_slot) inserts nothing.
    ids = sql.insert_runs([fields for _s, fields, _at in chosen]) if chosen else []
    starting: list[Starting] = []
    for (slot_id, fields, start), run_id in zip(chosen, ids, strict=True):
        if run_id is None:
            skipped.setdefault("another backfill ran it", []).append(slot_id)
        else:
            starting.append(Starting(slot_id, Run(pk=run_id, **fields), start))
    # A statement per kind of change, not per slot.
    BackfillSlot.objects.bulk_update(
        [
            BackfillSlot(pk=s.slot_id, state=BackfillSlotState.STARTED, run_id=s.run.pk)
            for s in starting
        ],
        ["state", "run_id"],
    )
    for note, slot_ids in skipped.items():
        BackfillSlot.objects.filter(pk__in=slot_ids).update(
            state=BackfillSlotState.SKIPPED, note=note
        )
    return starting


def _not_runnable(endpoint: ClaimedEndpoint | None, now: datetime) -> str:
    if endpoint is None:
        return "the endpoint was deleted"
    if endpoint.archived_at is not None:
        return "the endpoint was archived"
    if endpoint.job_status != JobStatus.ACTIVE:
        return f"its job was {endpoint.job_status}"
    if endpoint.is_paused(now):
        return "the endpoint was paused"
    return ""


def _run_fields(
    endpoint: ClaimedEndpoint, at: datetime, start: datetime, *, attempt: int
) -> dict[str, Any]:
    """The columns of the slot's backfill Run as it starts."""
    lease = timedelta(
        milliseconds=endpoint.timeout_ms, seconds=settings.CRONICORN_LEASE_SECONDS * 2
    )
    return {
        "endpoint_id": endpoint.pk,
        "trigger": RunTrigger.BACKFILL,
        "source": BASELINE_CRON if endpoint.baseline_cron else BASELINE_INTERVAL,
        "scheduled_for": at,
        "started_at": start,
        "status": RunStatus.RUNNING,
        "claim_token": uuid.uuid4(),  # no slot's: a backfill holds no claim
        "lease_expires_at": start + lease,
        "request_method": endpoint.method,
        "request_url": strip_userinfo(endpoint.url),
        "attempt": attempt,
        "retry_of_id": None,
        "response_truncated": False,
        "error": "",
    }


def _settle(backfill: Backfill, now: datetime) -> None:
    """Slots whose run ended without its outcome reaching the slot (a worker that died:
    the sweep marked the run lost) take the run's state; with none left in flight, the
    backfill is done."""
    started = BackfillSlot.objects.filter(backfill=backfill, state=BackfillSlotState.STARTED)
    ended = dict(
        Run.objects.filter(pk__in=list(started.values_list("run_id", flat=True)))
        .exclude(status=RunStatus.RUNNING)
        .values_list("pk", "status")
    )
    for run_id, status in ended.items():
        started.filter(run_id=run_id).update(state=_state_of(status))
    if not started.exists():
        Backfill.objects.filter(pk=backfill.pk).update(status=BackfillStatus.DONE, finished_at=now)
        log_event(logging.INFO, f"backfill {backfill.pk} done")


def _state_of(status: str) -> str:
    return BackfillSlotState.SUCCEEDED if status == RunStatus.SUCCESS else BackfillSlotState.FAILED


@dataclass
class Finished:
    slot_id: int
    run: Run
    columns: dict[str, Any]


class BackfillRunner:
    """One per process: the passes of the loop, the requests in flight on the executor's
    event loop, and the writer thread of their outcomes."""

    def __init__(self) -> None:
        executor.prepare()
        self._done: queue.SimpleQueue[Finished | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._in_flight: set[Future[HttpResult]] = set()
        self._idle = threading.Condition(self._lock)
        self._writer = threading.Thread(
            target=self._write_loop, name="cronicorn-backfill-writer", daemon=True
        )
        self._writer.start()

    @property
    def in_flight(self) -> int:
        with self._lock:
            return len(self._in_flight)

    def run_once(self, *, now: datetime | None = None) -> int:
        """One pass: the due slots of every running backfill recorded and sent; returns
        how many runs started."""
        now = now or timezone.now()
        due = list(
            Backfill.objects.filter(status__in=ACTIVE, paced_until__lt=now + HORIZON)
            .order_by("paced_until")
            .values_list("pk", flat=True)[:BACKFILLS_PER_PASS]
        )
        started = 0
        most = 1 if due and live_is_late(now) else BATCH
        for backfill_id in due:
            starting = claim_backfill_slots(backfill_id, now=now, most=most)
            self._send(starting)
            started += len(starting)
        return started

    def _send(self, starting: Sequence[Starting]) -> None:
        if not starting:
            return
        endpoints = sql.load_endpoints(sorted({s.run.endpoint_id for s in starting}))
        for each in starting:
            endpoint = endpoints.get(each.run.endpoint_id)
            if endpoint is None:
                self._finished(each, None, not_called("failure", "The endpoint was deleted."))
                continue
            request = request_for(
                endpoint, endpoint.hmac_secret, endpoint.hmac_secret_previous, each.run
            )
            # Not sent once a third of the run's lease has gone (a stalled process): its
            # record would be swept as lost meanwhile.
            deadline = each.at + timedelta(seconds=settings.CRONICORN_LEASE_SECONDS / 3)
            future = executor.submit_request(
                request,
                at=each.at.timestamp(),
                deadline=deadline.timestamp(),
                lane=endpoint.tenant_id,
            )
            with self._lock:
                self._in_flight.add(future)
            future.add_done_callback(functools.partial(self._on_done, each=each, endpoint=endpoint))

    def _on_done(
        self, future: Future[HttpResult], *, each: Starting, endpoint: ClaimedEndpoint
    ) -> None:
        try:
            result = future.result()
        except NotSent:
            result = not_called("failure", "Not sent: the process was too late to send it.")
        except Exception as exc:  # the executor resolves with results; never lose a run
            result = not_called("failure", f"Scheduler error: {type(exc).__name__}: {exc}")
        self._finished(each, endpoint, result)
        with self._lock:
            self._in_flight.discard(future)
            self._idle.notify_all()

    def _finished(
        self, each: Starting, endpoint: ClaimedEndpoint | None, result: HttpResult
    ) -> None:
        if endpoint is not None:
            result, _kind = judged(result, endpoint.policy)
        started = each.at
        if result.sent_at is not None:
            started = max(started, datetime.fromtimestamp(result.sent_at, tz=UTC))
        columns = finish_columns(result, started=started, finished=timezone.now())
        self._done.put(Finished(each.slot_id, each.run, columns))

    def _write_loop(self) -> None:
        while True:
            item = self._done.get()
            if item is None:
                connections.close_all()  # this thread's
                return
            batch = [item]
            deadline = timezone.now() + timedelta(seconds=WRITE_LINGER)
            while len(batch) < WRITE_BATCH:
                wait = (deadline - timezone.now()).total_seconds()
                try:
                    more = (
                        self._done.get(timeout=max(wait, 0))
                        if wait > 0
                        else self._done.get_nowait()
                    )
                except queue.Empty:
                    break
                if more is None:
                    self._done.put(None)  # stop after this batch
                    break
                batch.append(more)
            try:
                close_old_connections()
                record_finished(batch)
            except Exception:
                log_event(logging.ERROR, f"could not record {len(batch)} backfill run(s)", exc=True)

    def shutdown(self, *, timeout: float) -> bool:
        """Wait up to ``timeout`` for the runs in flight to be sent, answered and written;
        True when none is left."""
        with self._idle:
            self._idle.wait_for(lambda: not self._in_flight, timeout=timeout)
            left = len(self._in_flight)
        self._done.put(None)
        self._writer.join(timeout=max(timeout, 1))
        return left == 0


def record_finished(batch: Sequence[Finished]) -> None:
    """The runs' outcomes and their slots' states, in one transaction."""
    with transaction.atomic():
        written = sql.finish_runs([(item.run.pk, item.columns) for item in batch])
        by_state: dict[str, list[int]] = {}
        for item, ok in zip(batch, written, strict=True):
            if ok:
                by_state.setdefault(_state_of(item.columns["status"]), []).append(item.slot_id)
        for state, ids in by_state.items():
            BackfillSlot.objects.filter(pk__in=ids).update(state=state)
    for item, ok in zip(batch, written, strict=True):
        if ok:
            item.run.started_at = item.columns["started_at"]
            metrics.record_run(
                item.run, status=item.columns["status"], duration_ms=item.columns["duration_ms"]
            )
