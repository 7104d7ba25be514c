"""Celery tasks of the engine: thin wrappers around ``endpoints.engine``.

- ``cronicorn.tick`` (queue ``tick``, sent by beat every ``CRONICORN_TICK_SECONDS``):
  claims, then after commit sends the claims as chunks to ``cronicorn.execute``.
- ``cronicorn.execute`` (queue ``execute``): hands a chunk of claims to this worker
  process's dispatcher, which starts each at its own scheduled time and renews its lease
  while it holds it. The task returns at once: a claim waiting in the dispatcher is
  renewed, one waiting for a Celery thread would not be, and under load its lease would
  expire and the slot be claimed again and again (measured: half the throughput).
- ``cronicorn.sweep_zombies`` / ``cronicorn.prune_runs`` (queue ``maintenance``).
- ``cronicorn.backfill_cycle`` (queue ``execute``, sent by beat every tick): one pass of
  the backfill loop in this worker process (``engine.backfilling``): the next slots of the
  running backfills, at their rates, through the process's HTTP event loop.

Why chunks: a Celery message costs about 2.5 ms of CPU end to end here, so one message
per run would cap the fleet near 500 runs/s. Claims due within the same short window
travel together (up to ``CHUNK_SIZE``), with the ETA of the earliest; the dispatcher
then starts each at its own ``scheduled_for``.

Every task is idempotent: a stale claim does nothing, and a claim delivered again while
its run is in flight does nothing either (one run per claim, decided by the database:
``runs._start_run``), so whatever the broker redelivers (``acks_late`` after a
connection drop, a duplicate publish, a visibility timeout) runs nothing twice. Results
are ignored and there is no result backend: the Run row is the record of an execution,
and each loop's Heartbeat row of its last pass (docs/DESIGN.md, "Processes").
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from datetime import timedelta
from functools import partial
from typing import Any

from celery import shared_task
from celery.signals import (
    beat_init,
    worker_init,
    worker_process_init,
    worker_process_shutdown,
    worker_ready,
    worker_shutdown,
)
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from endpoints.engine import claiming, executor, maintenance
from endpoints.engine.backfilling import BackfillRunner
from endpoints.engine.claiming import Claim
from endpoints.engine.dispatch import ClaimDispatcher, freeze_startup_heap

logger = logging.getLogger("cronicorn.scheduler")

CHUNK_SIZE = 50
CHUNK_WINDOW = timedelta(milliseconds=200)
# A chunk reaches its worker this long before its first claim's time: the dispatcher
# records Runs ahead of their time (dispatch.START_AHEAD), and Celery's own ETA timer
# was measured up to 150 ms late at 833 runs/s (issue 23).
ETA_LEAD = timedelta(milliseconds=500)
# Publishing is retried a few times on broker errors, never forever: claims that cannot
# be sent are released for the next tick.
BROKER_RETRY = {"max_retries": 3, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.5}

_dispatcher: ClaimDispatcher | None = None
_dispatcher_lock = threading.Lock()
_backfills: BackfillRunner | None = None


def dispatcher() -> ClaimDispatcher:
    """This process's dispatcher, created on first use (after any fork)."""
    global _dispatcher
    with _dispatcher_lock:
        if _dispatcher is None:
            _dispatcher = ClaimDispatcher(max_in_flight=settings.CRONICORN_MAX_IN_FLIGHT)
        return _dispatcher


def backfill_runner() -> BackfillRunner:
    """This process's backfill loop, created on first use (after any fork)."""
    global _backfills
    with _dispatcher_lock:
        if _backfills is None:
            _backfills = BackfillRunner()
        return _backfills


def group_claims(claims: Sequence[Claim]) -> list[list[Claim]]:
    """Chunks of claims starting within ``CHUNK_WINDOW`` of the chunk's first, earliest
    first (a catch-up starts after its slot: ``Claim.starts_at``)."""
    chunks: list[list[Claim]] = []
    for claim in sorted(claims, key=lambda c: c.starts_at):
        current = chunks[-1] if chunks else None
        if (
            current is not None
            and len(current) < CHUNK_SIZE
            and claim.starts_at - current[0].starts_at < CHUNK_WINDOW
        ):
            current.append(claim)
        else:
            chunks.append([claim])
    return chunks


@shared_task(name="cronicorn.tick", ignore_result=True, soft_time_limit=30, time_limit=60)
def tick() -> int:
    return len(claiming.tick(dispatch=send_after_commit))


def send_after_commit(claims: list[Claim]) -> None:
    # Each batch's claim has committed; enqueue only then (a worker must find the lease).
    transaction.on_commit(partial(send_claims, claims))


def send_claims(claims: Sequence[Claim]) -> None:
    unsent: list[Claim] = []
    for chunk in group_claims(claims):
        try:
            execute.apply_async(
                args=([claim.to_payload() for claim in chunk],),
                eta=chunk[0].starts_at - ETA_LEAD,
                retry=True,
                retry_policy=BROKER_RETRY,
            )
        except Exception:
            logger.exception("could not send %d claim(s) to the broker", len(chunk))
            unsent.extend(chunk)
    if unsent:
        released = claiming.release_claims(unsent)
        logger.warning("released %d unsent claim(s) for the next tick", released)


@shared_task(
    name="cronicorn.execute", acks_late=True, ignore_result=True, soft_time_limit=30, time_limit=60
)
def execute(payloads: list[dict[str, Any]]) -> int:
    """Hand a chunk of claims to this process's dispatcher; returns how many it took.

    The message is acknowledged once the dispatcher holds the claims: from then on the
    database lease, renewed by the dispatcher, is what keeps a claim, and a message lost
    or delivered again costs nothing but a lease or a no-op (DESIGN "Life of a run").
    """
    claims = []
    for payload in payloads:
        try:
            claims.append(Claim.from_payload(payload))
        except (KeyError, TypeError, ValueError):
            logger.error("dropped a malformed claim payload: %r", payload)
    for claim in claims:
        dispatcher().submit(claim)
    return len(claims)


@shared_task(name="cronicorn.backfill_cycle", ignore_result=True, soft_time_limit=30, time_limit=60)
def backfill_cycle() -> int:
    """One pass of the backfill loop; returns how many backfill runs it started. Its
    requests go on in this process after the task returns, and their outcomes are
    written by its writer thread."""
    return backfill_runner().run_once()


@worker_init.connect
def prepare_worker(**_: Any) -> None:
    """Before the first task (and before a prefork pool forks): the HTTP client's TLS
    trust store, so the first runs of a starting fleet do not wait for it."""
    executor.prepare()


@worker_ready.connect  # a solo or threads pool: the worker is this process
@worker_process_init.connect  # each process of a prefork pool
@beat_init.connect
def freeze_at_start(**_: Any) -> None:
    """Everything loaded so far lives as long as the process: keep it out of the
    garbage collector's full collections, which otherwise pause every thread for
    ~100 ms every few seconds under load (``dispatch.freeze_startup_heap``)."""
    freeze_startup_heap()


@worker_shutdown.connect
@worker_process_shutdown.connect
def stop_dispatcher(**_: Any) -> None:
    """A worker stopping (warm shutdown) gives back the claims it has not started and
    waits, up to ``CRONICORN_SHUTDOWN_TIMEOUT_SECONDS``, for its runs in flight, as
    ``runscheduler`` does. A killed worker does nothing here: its leases expire."""
    global _dispatcher, _backfills
    with _dispatcher_lock:
        current, _dispatcher = _dispatcher, None
        backfills, _backfills = _backfills, None
    if backfills is not None and not backfills.shutdown(
        timeout=settings.CRONICORN_SHUTDOWN_TIMEOUT_SECONDS
    ):
        logger.warning("stopped with backfill runs still in flight; the sweep marks them lost")
    if current is None:
        return
    pending = current.drain_pending()
    if pending:
        released = claiming.release_claims(pending)
        logger.info("released %d claim(s) that had not started", released)
    if not current.shutdown(timeout=settings.CRONICORN_SHUTDOWN_TIMEOUT_SECONDS):
        logger.warning("stopped with runs still in flight; their leases will expire")


@shared_task(name="cronicorn.sweep_zombies", ignore_result=True, time_limit=300)
def sweep_zombies() -> int:
    now = timezone.now()
    maintenance.end_signing_grace(now=now)
    return maintenance.sweep_zombies(now=now)


@shared_task(name="cronicorn.prune_runs", ignore_result=True, time_limit=3600)
def prune_runs() -> int:
    return maintenance.retention_cycle(now=timezone.now())
