"""Celery tasks of the engine: thin wrappers around ``endpoints.scheduling``.

- ``cronicorn.tick`` (queue ``tick``, sent by beat every ``CRONICORN_TICK_SECONDS``):
  claims, then after commit sends the claims as chunks to ``cronicorn.execute``.
- ``cronicorn.execute`` (queue ``execute``): runs a chunk of claims concurrently on
  this worker process's dispatcher, each at its own scheduled time.
- ``cronicorn.sweep_zombies`` / ``cronicorn.prune_runs`` (queue ``maintenance``).

Why chunks: a Celery message costs about 2.5 ms of CPU end to end here, so one message
per run would cap the fleet near 500 runs/s. Claims due within the same short window
travel together (up to ``CHUNK_SIZE``), with the ETA of the earliest; the dispatcher
then starts each at its own ``scheduled_for``.

Every task is idempotent: a stale claim does nothing, and a claim delivered again while
its run is in flight does nothing either (one run per claim, decided by the database:
``scheduling._start_run``), so whatever the broker redelivers (``acks_late`` after a
connection drop, a duplicate publish, a visibility timeout) runs nothing twice. Results
are ignored (the Run row is the record).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from concurrent.futures import wait as wait_for_futures
from datetime import timedelta
from functools import partial
from typing import Any

from celery import shared_task
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from endpoints import scheduling
from endpoints.dispatch import ClaimDispatcher
from endpoints.models import MAX_TIMEOUT_MS
from endpoints.scheduling import Claim

logger = logging.getLogger("cronicorn.scheduler")

CHUNK_SIZE = 50
CHUNK_WINDOW = timedelta(milliseconds=200)
# A chunk may wait for its last claim's slot and then for the slowest endpoint.
EXECUTE_SOFT_LIMIT = MAX_TIMEOUT_MS // 1000 + 60
# Publishing is retried a few times on broker errors, never forever: claims that cannot
# be sent are released for the next tick.
BROKER_RETRY = {"max_retries": 3, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.5}

_dispatcher: ClaimDispatcher | None = None
_dispatcher_lock = threading.Lock()


def dispatcher() -> ClaimDispatcher:
    """This process's dispatcher, created on first use (after any fork)."""
    global _dispatcher
    with _dispatcher_lock:
        if _dispatcher is None:
            _dispatcher = ClaimDispatcher(max_in_flight=settings.CRONICORN_MAX_IN_FLIGHT)
        return _dispatcher


def group_claims(claims: Sequence[Claim]) -> list[list[Claim]]:
    """Chunks of claims due within ``CHUNK_WINDOW`` of the chunk's first, earliest first."""
    chunks: list[list[Claim]] = []
    for claim in sorted(claims, key=lambda c: c.scheduled_for):
        current = chunks[-1] if chunks else None
        if (
            current is not None
            and len(current) < CHUNK_SIZE
            and claim.scheduled_for - current[0].scheduled_for < CHUNK_WINDOW
        ):
            current.append(claim)
        else:
            chunks.append([claim])
    return chunks


@shared_task(name="cronicorn.tick", ignore_result=True, soft_time_limit=30, time_limit=60)
def tick() -> int:
    return len(scheduling.tick(dispatch=send_after_commit))


def send_after_commit(claims: list[Claim]) -> None:
    # Each batch's claim has committed; enqueue only then (a worker must find the lease).
    transaction.on_commit(partial(send_claims, claims))


def send_claims(claims: Sequence[Claim]) -> None:
    unsent: list[Claim] = []
    for chunk in group_claims(claims):
        try:
            execute.apply_async(
                args=([claim.to_payload() for claim in chunk],),
                eta=chunk[0].scheduled_for,
                retry=True,
                retry_policy=BROKER_RETRY,
            )
        except Exception:
            logger.exception("could not send %d claim(s) to the broker", len(chunk))
            unsent.extend(chunk)
    if unsent:
        released = scheduling.release_claims(unsent)
        logger.warning("released %d unsent claim(s) for the next tick", released)


@shared_task(
    name="cronicorn.execute",
    acks_late=True,
    ignore_result=True,
    soft_time_limit=EXECUTE_SOFT_LIMIT,
    time_limit=EXECUTE_SOFT_LIMIT + 30,
)
def execute(payloads: list[dict[str, Any]]) -> int:
    """Run a chunk of claims concurrently; returns how many ran (stale ones do nothing)."""
    claims = []
    for payload in payloads:
        try:
            claims.append(Claim.from_payload(payload))
        except (KeyError, TypeError, ValueError):
            logger.error("dropped a malformed claim payload: %r", payload)
    futures = [dispatcher().submit(claim) for claim in claims]
    wait_for_futures(futures)
    return sum(1 for future in futures if future.result() is not None)


@shared_task(name="cronicorn.sweep_zombies", ignore_result=True, time_limit=300)
def sweep_zombies() -> int:
    return scheduling.sweep_zombies(now=timezone.now())


@shared_task(name="cronicorn.prune_runs", ignore_result=True, time_limit=3600)
def prune_runs() -> int:
    return scheduling.prune_runs(now=timezone.now())
