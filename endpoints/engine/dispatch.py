"""Start claims on time: a timer holds each claim until shortly before its time, starter
threads record the Runs of what is due, the process's HTTP event loop calls each
endpoint at its time, and one writer records the runs that finish together.

One dispatcher per process: the Celery execute task hands it the claims of a chunk,
``runscheduler`` hands it every claim of a tick. One timer thread sleeps until the
earliest claim is almost due (a heap, not a sleeping thread per claim); the event loop's
own timer sends each request at its slot.

The stages, each batching what reaches it together (no stage waits to make a batch,
except the writer's short linger):

1. a starter thread takes every claim due within ``START_AHEAD`` (up to ``START_BATCH``)
   and records their Runs ahead of their time: one read of the endpoints, one insert of
   the Runs (``running.start_claims``);
2. the requests run on the executor's event loop (``executor.submit_request``), each
   sent at its claim's time by the loop's own timer, so no thread waits on a socket and
   a request costs a fraction of a thread's CPU;
3. each finished request hands its outcome to the writer, which waits up to
   ``WRITE_LINGER`` for others and finishes them all in one transaction
   (``running.record_outcomes``). A claim's future resolves once its run is written.

``max_in_flight`` bounds the runs started and not yet written, whose time has come (runs
recorded ahead of it do not count): past it, the timer holds due claims back.

A renewer thread keeps the leases of every claim the dispatcher holds (waiting for its
time, or with its run in flight) alive, every third of ``CRONICORN_LEASE_SECONDS``: a
live process keeps its claims however long its runs take, a dead or stopped one loses
them within one lease (DESIGN "Life of a run", step 6). A claim starts at its slot, or
for a catch-up at the later time its claim gave it (``claiming.spread_start``).

Starter, writer and renewer threads keep their database connection between batches and
close it when the dispatcher stops; they are daemons, so a shutdown that gives up on a
hung request is not then blocked by it at exit.
"""

from __future__ import annotations

import functools
import gc
import heapq
import itertools
import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from concurrent.futures import wait as wait_for_futures
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import close_old_connections, connections
from django.utils import timezone

from endpoints.engine import executor, host_limits
from endpoints.engine.claiming import Claim, spread_offset
from endpoints.engine.host_limits import Held
from endpoints.engine.leases import renew_leases
from endpoints.engine.outcomes import Outcome
from endpoints.engine.overlap_allow import Full
from endpoints.engine.running import UNAVAILABLE, Started, record_outcomes, start_claims
from endpoints.models import Run

logger = logging.getLogger("cronicorn.scheduler")

# Claims one starter records at once, and how many starters (each with a connection).
START_BATCH = 50
STARTERS = 2
# How far ahead of its time a claim's Run is recorded: when the earliest waiting claim is
# half this away, every claim due within it goes to the starters, whose Runs are written
# together; each request is then sent at its own time by the event loop. Measured at
# 833 runs/s (bench/lateness.py, issue 23): start transactions of 50 claims (START_BATCH)
# instead of 3, PostgreSQL's CPU per run -17 %, and a slow commit no longer makes the
# runs behind it late (of the runs still late, most were recorded in time).
START_AHEAD = 0.2
# How long a finished run's outcome may wait for others to share its transaction, and
# how many share one at most. Saturated (bench/throughput.py), a transaction carried
# ≈ 17 runs on average; a quiet scheduler writes each run ≤ 20 ms after it ends.
WRITE_LINGER = 0.02
WRITE_BATCH = 50

# How long the writer keeps trying to record a batch while the database is away, and its
# longest wait between tries: outcomes recorded after a short outage are not lost.
WRITE_RETRY_SECONDS = 30.0
WRITE_RETRY_MAX_WAIT = 2.0
# How soon a claim whose start met an unavailable database is tried again; and a claim
# of an endpoint with its ``overlap: {"allow": N}`` calls all in flight.
START_RETRY = 0.5

# What starting a claim gives: a run to call, an outcome already called (test seams),
# a run a scheduler error cut short, or None (nothing to run).
# a claim its host's rate limit holds back (started again at its reserved time), or FULL
# (its endpoint's ``overlap: {"allow": N}`` calls are all in flight: held for later).
Start = Callable[[list[Claim]], Sequence[Started | Held | Outcome | Run | Full | None]]
# Renews the leases of the claims and runs held: (claims, run ids) -> endpoint ids renewed.
Renew = Callable[[list[Claim], list[int]], set[int]]


def freeze_startup_heap() -> None:
    """Leave what a long-lived process loaded at its start out of every later garbage
    collection (``gc.freeze``): call once its setup is done.

    A full collection holds the GIL while it walks every tracked object: with Django,
    Celery and the HTTP client loaded, ~200 000 objects and 80-120 ms on this 2-core
    machine, during which no request is sent. A worker at 833 runs/s ran one every 2-3 s
    (objects of runs in flight live long enough to reach the oldest generation), and
    each made a burst of late runs. Frozen, the same collection walks the ~30 000
    objects of the runs themselves: ~10 ms (bench/lateness.py, issue 23)."""
    gc.collect()
    gc.freeze()


def start_due_claims(claims: list[Claim]) -> list[Started | Held | Full | None]:
    """Record the Runs of claims due together on a starter thread, ahead of their time
    (``START_AHEAD``); their requests are sent at their time."""
    close_old_connections()  # this thread's connection may have gone stale between batches
    return start_claims(claims, ahead=True)


def record(outcomes: list[Outcome]) -> datetime | None:
    close_old_connections()  # the writer's connection may have gone stale between batches
    return record_outcomes(outcomes)


def renew(claims: list[Claim], runs: list[int]) -> set[int]:
    close_old_connections()
    return renew_leases(claims, runs, now=timezone.now())


class ClaimDispatcher:
    def __init__(
        self,
        *,
        max_in_flight: int,
        start: Start = start_due_claims,
        record: Callable[[list[Outcome]], Any] = record,
        renew: Renew = renew,
        on_planned: Callable[[datetime], None] | None = None,
    ) -> None:
        executor.prepare()
        self._max_in_flight = max_in_flight
        self._start_claims = start
        self._record = record
        self._renew = renew
        # Told the earliest next run each written batch planned (``record``'s answer).
        self._on_planned = on_planned
        self._condition = threading.Condition()
        self._heap: list[tuple[float, int, Claim, Future[Any]]] = []
        self._order = itertools.count()
        # Claims started and not written yet, and the ids of their runs once recorded.
        self._in_flight: dict[Future[Any], Claim] = {}
        # The times of the claims handed to the starters that have not come yet (a heap).
        self._ahead: list[float] = []
        self._runs: dict[Future[Any], int] = {}
        # Claims whose start met an unavailable database, since when (monotonic).
        self._unavailable_since: dict[uuid.UUID, float] = {}
        # Claims held because their endpoint's overlap allowance is used up (logged once).
        self._held: set[uuid.UUID] = set()
        self._closed = False
        self._due: queue.SimpleQueue[tuple[Claim, Future[Any]] | None] = queue.SimpleQueue()
        self._starters = [
            threading.Thread(target=self._start_loop, name=f"cronicorn-start-{k}", daemon=True)
            for k in range(STARTERS)
        ]
        self._timer = threading.Thread(target=self._run_timer, name="cronicorn-timer", daemon=True)
        # Outcomes waiting for the writer, each with its future and when it arrived.
        self._written = threading.Condition()
        self._outcomes: list[tuple[Outcome, Future[Any], float]] = []
        self._writing = True
        self._lingering = True  # False once shutting down: write at once
        self._writer = threading.Thread(
            target=self._write_loop, name="cronicorn-writer", daemon=True
        )
        self._stopped = threading.Event()
        self._renewer = threading.Thread(
            target=self._renew_loop, name="cronicorn-renewer", daemon=True
        )
        for thread in (*self._starters, self._timer, self._writer, self._renewer):
            thread.start()

    def submit(self, claim: Claim) -> Future[Any]:
        """Execute ``claim`` at its scheduled time (at once if that has passed)."""
        future: Future[Any] = Future()
        with self._condition:
            if self._closed:
                raise RuntimeError("The dispatcher is shut down; no new claims.")
            entry = (claim.starts_at.timestamp(), next(self._order), claim, future)
            heapq.heappush(self._heap, entry)
            self._condition.notify()
        return future

    @property
    def pending(self) -> int:
        with self._condition:
            return len(self._heap)

    @property
    def in_flight(self) -> int:
        with self._condition:
            return len(self._in_flight)

    def drain_pending(self) -> list[Claim]:
        """Take back every claim not started yet (their futures are cancelled)."""
        with self._condition:
            entries, self._heap = self._heap, []
        for entry in entries:
            self._held.discard(entry[2].claim_token)
            # A claim held back (its host's limit, its overlap allowance) or tried again
            # after an outage has a running future already: resolved with nothing, so no
            # caller waits on it.
            if not entry[3].cancel() and not entry[3].done():
                entry[3].set_result(None)
        return [entry[2] for entry in sorted(entries)]

    def shutdown(self, *, timeout: float) -> bool:
        """Stop the timer and wait up to ``timeout`` s for runs in flight; True if all ended.

        Claims still pending should be taken back with ``drain_pending`` first.
        """
        with self._condition:
            self._closed = True
            running = set(self._in_flight)
            self._condition.notify()
        # Runs still in flight keep their leases while this waits for them.
        with self._written:
            self._lingering = False
            self._written.notify()
        deadline = time.monotonic() + timeout
        _done, not_done = wait_for_futures(running, timeout=timeout)
        for _starter in self._starters:
            self._due.put(None)  # each starter exits after the claims queued before it
        for starter in self._starters:
            starter.join(timeout=max(deadline - time.monotonic(), 0))
        with self._written:
            self._writing = False  # the writer writes what is left, then exits
            self._written.notify()
        self._writer.join(timeout=max(deadline - time.monotonic(), 0))
        self._stopped.set()
        return not not_done

    def held(self) -> list[tuple[Claim, int | None]]:
        """The claims this dispatcher holds (waiting or in flight), each with its run's id
        once the run is recorded."""
        with self._condition:
            held: list[tuple[Claim, int | None]] = [(entry[2], None) for entry in self._heap]
            held += ((claim, self._runs.get(future)) for future, claim in self._in_flight.items())
            return held

    def _renew_loop(self) -> None:
        """Every third of a lease, renew the held leases that end within two turns. Most
        runs end long before that, so most claims are never renewed: a claim's lease ends
        at least a lease after its slot, and after a renewal a lease after it."""
        lease = settings.CRONICORN_LEASE_SECONDS
        every = lease / 3
        ends: dict[uuid.UUID, float] = {}
        try:
            while not self._stopped.wait(every):
                held = self.held()
                ends = {
                    claim.claim_token: ends.get(
                        claim.claim_token, claim.scheduled_for.timestamp() + lease
                    )
                    for claim, _run in held
                }
                soon = time.time() + 2 * every
                due = [(claim, run) for claim, run in held if ends[claim.claim_token] < soon]
                if not due:
                    continue
                started = time.time()
                try:
                    renewed = self._renew(
                        [claim for claim, _run in due], [run for _claim, run in due if run]
                    )
                except Exception as exc:
                    # The database may be away: the next turn tries again, and a lease
                    # lasts two more turns.
                    logger.warning("could not renew %d lease(s): %s", len(due), exc)
                    continue
                for claim, _run in due:
                    if claim.endpoint_id in renewed:
                        ends[claim.claim_token] = started + lease
        finally:
            connections.close_all()

    def _run_timer(self) -> None:
        with self._condition:
            while not self._closed:
                if not self._heap or self._full():
                    self._condition.wait()  # woken by a new claim, or a run written
                    continue
                delay = self._heap[0][0] - START_AHEAD / 2 - time.time()
                if delay > 0:
                    self._condition.wait(timeout=delay)
                    continue
                # Everything due within the lead goes to the starters together.
                horizon = time.time() + START_AHEAD
                while self._heap and self._heap[0][0] <= horizon and not self._full():
                    at, _order, claim, future = heapq.heappop(self._heap)
                    heapq.heappush(self._ahead, at)
                    self._in_flight[future] = claim
                    future.add_done_callback(self._forget)
                    self._due.put((claim, future))

    def _full(self) -> bool:
        """``max_in_flight`` runs started whose time has come: hold the rest back. Runs
        recorded ahead and waiting for their time hold no connection and do not count,
        or the lead itself would fill the bound (at 833 runs/s, 0.2 s ahead is 166)."""
        now = time.time()
        while self._ahead and self._ahead[0] <= now:
            heapq.heappop(self._ahead)
        return len(self._in_flight) - len(self._ahead) >= self._max_in_flight

    def _forget(self, future: Future[Any]) -> None:
        with self._condition:
            self._in_flight.pop(future, None)
            self._runs.pop(future, None)
            self._condition.notify()

    def _start_loop(self) -> None:
        try:
            while (item := self._due.get()) is not None:
                batch = [item]
                while len(batch) < START_BATCH:
                    try:
                        item = self._due.get_nowait()
                    except queue.Empty:
                        break
                    if item is None:
                        self._due.put(None)  # another starter's; this one ends next round
                        break
                    batch.append(item)
                self._start_batch(batch)
        finally:
            connections.close_all()

    def _start_batch(self, batch: list[tuple[Claim, Future[Any]]]) -> None:
        # A claim tried again after an outage is running already (see _start_again).
        live = [
            (claim, future)
            for claim, future in batch
            if future.running() or future.set_running_or_notify_cancel()
        ]
        if not live:
            return
        try:
            started = self._start_claims([claim for claim, _future in live])
        except UNAVAILABLE as exc:
            self._start_again(live, exc)
            return
        except BaseException as exc:
            for _claim, future in live:
                future.set_exception(exc)
            return
        for claim, _future in live:
            self._unavailable_since.pop(claim.claim_token, None)
        for (claim, future), item in zip(live, started, strict=True):
            if isinstance(item, Full):
                self._wait_for_a_call(claim, future)
            elif isinstance(item, Started):
                with self._condition:
                    if not future.done():
                        self._runs[future] = item.run.pk
                try:
                    request = item.call()
                except Exception:
                    self._abandon(item, future, "could not start the request")
                    continue
                request.add_done_callback(functools.partial(self._called, item, future))
            elif isinstance(item, Outcome):
                self._hand_to_writer(item, future)
            elif isinstance(item, Held):  # until its reserved start
                self._hold(item.claim, future, until=item.claim.starts_at.timestamp())
            else:
                future.set_result(item)

    def _start_again(self, live: list[tuple[Claim, Future[Any]]], exc: Exception) -> None:
        """The database is away (a restart): the claims are still ours, so try them again
        in ``START_RETRY`` seconds rather than leave them to their leases, for as long as a
        lease lasts; then give up (the leases have expired: another claimer may have them).
        Each is tried again at its endpoint's catch-up offset, so that the claims held up
        together do not all start in the same instant once the database is back."""
        now = time.monotonic()
        retry: list[tuple[Claim, Future[Any]]] = []
        for claim, future in live:
            since = self._unavailable_since.setdefault(claim.claim_token, now)
            if now - since < settings.CRONICORN_LEASE_SECONDS:
                retry.append((claim, future))
            else:
                self._unavailable_since.pop(claim.claim_token, None)
                future.set_result(None)
        logger.warning(
            "database unavailable while starting %d run(s) (%s); %s",
            len(live),
            exc,
            f"trying again in {START_RETRY} s" if retry else "left to their leases",
        )
        with self._condition:
            at = time.time() + START_RETRY
            for claim, future in retry:
                spread = spread_offset(claim.endpoint_id).total_seconds()
                heapq.heappush(self._heap, (at + spread, next(self._order), claim, future))
            self._condition.notify()

    def _hold(self, claim: Claim, future: Future[Any], *, until: float) -> None:
        """Back to the heap until ``until``, its lease renewed meanwhile as every waiting
        claim's; not in flight: it holds no run, no place of ``max_in_flight``, and a
        shutdown gives it back (``drain_pending``) rather than wait for it."""
        with self._condition:
            self._in_flight.pop(future, None)
            self._runs.pop(future, None)
            heapq.heappush(self._heap, (until, next(self._order), claim, future))
            self._condition.notify()

    def _wait_for_a_call(self, claim: Claim, future: Future[Any]) -> None:
        """A claim of an endpoint whose ``overlap: {"allow": N}`` calls are all in flight:
        held and started again in ``START_RETRY`` seconds, until one of them has ended.
        Not given back: the next tick would take it again and again, and another slot
        could pass it."""
        if claim.claim_token not in self._held:
            self._held.add(claim.claim_token)
            logger.info(
                "endpoint %s has its calls in flight, as many as its overlap allows; "
                "its slot of %s waits for one to end",
                claim.endpoint_id,
                claim.scheduled_for.isoformat(),
            )
            future.add_done_callback(lambda _f: self._held.discard(claim.claim_token))
        self._hold(claim, future, until=time.time() + START_RETRY)

    def _called(self, started: Started, future: Future[Any], request: Future[Any]) -> None:
        """On the HTTP event loop's thread: hand the outcome over, touch no database."""
        try:
            result = request.result()
        except executor.NotSent as exc:
            # The run stays running: the sweep declares it lost and its claim's retry
            # (another worker's, if it took the slot meanwhile) runs the slot once.
            logger.warning("run %s not sent, its lease too near its end: %s", started.run.pk, exc)
            future.set_result(started.run)
            return
        except BaseException:
            self._abandon(started, future, "the request did not complete")
            return
        self._hand_to_writer(started.outcome(result), future)

    @staticmethod
    def _abandon(started: Started, future: Future[Any], why: str) -> None:
        """Log why (with the traceback) and resolve the claim's future; the run stays
        running until the sweep marks it lost after its lease."""
        logger.exception("%s for run %s", why, started.run.pk)
        future.set_result(started.run)

    def _hand_to_writer(self, outcome: Outcome, future: Future[Any]) -> None:
        with self._written:
            if self._writing:
                self._outcomes.append((outcome, future, time.monotonic()))
                # The writer sleeps until the first outcome, then lingers; wake it early
                # only when a full batch is waiting.
                if len(self._outcomes) in (1, WRITE_BATCH):
                    self._written.notify()
                return
        # A run that outlived a shutdown's wait: the writer is gone, write it on a thread
        # of its own (this may be the event loop's).
        threading.Thread(target=self._write_late, args=(outcome, future), daemon=True).start()

    def _write_loop(self) -> None:
        try:
            while batch := self._next_batch():
                self._write(batch)
        finally:
            connections.close_all()

    def _write_late(self, outcome: Outcome, future: Future[Any]) -> None:
        try:
            self._write([(outcome, future, 0.0)])
        finally:
            connections.close_all()

    def _write(self, batch: list[tuple[Outcome, Future[Any], float]]) -> None:
        """Record the batch, then resolve its futures, whatever happened: a caller (a
        Celery execute task) must never wait forever. While the database is away the
        batch is tried again for up to ``WRITE_RETRY_SECONDS`` (its leases are renewed
        meanwhile), so a short outage loses no outcome."""
        outcomes = [outcome for outcome, _future, _at in batch]
        self._note_429s(outcomes)
        gives_up = time.monotonic() + WRITE_RETRY_SECONDS
        wait = 0.1
        while True:
            try:
                planned = self._record(outcomes)
                if self._on_planned is not None and isinstance(planned, datetime):
                    self._on_planned(planned)
                break
            except UNAVAILABLE as exc:
                if time.monotonic() + wait > gives_up:
                    logger.error(
                        "could not record %d run(s), the database is unavailable (%s); "
                        "they will be declared lost and retried",
                        len(batch),
                        exc,
                    )
                    break
                logger.warning(
                    "database unavailable while recording %d run(s) (%s); trying again in %.1f s",
                    len(batch),
                    exc,
                    wait,
                )
                connections.close_all()
                time.sleep(wait)
                wait = min(wait * 2, WRITE_RETRY_MAX_WAIT)
            except Exception:
                logger.exception("could not record %d run(s); they will be lost", len(batch))
                break
        for outcome, future, _at in batch:
            future.set_result(outcome.run)

    @staticmethod
    def _note_429s(outcomes: list[Outcome]) -> None:
        """A 429 pauses its host's budget at once (``host_limits``); whatever goes wrong
        there, the batch is still recorded."""
        try:
            host_limits.note_outcomes(outcomes)
        except Exception as exc:
            logger.warning("could not note the 429s of %d run(s): %r", len(outcomes), exc)

    def _next_batch(self) -> list[tuple[Outcome, Future[Any], float]]:
        """Up to ``WRITE_BATCH`` outcomes once the oldest has waited ``WRITE_LINGER``
        (at once when shutting down); empty when shut down with nothing left."""
        with self._written:
            while not self._outcomes and self._writing:
                self._written.wait()
            if self._outcomes:
                ready_at = self._outcomes[0][2] + WRITE_LINGER
                while self._lingering and len(self._outcomes) < WRITE_BATCH:
                    left = ready_at - time.monotonic()
                    if left <= 0:
                        break
                    self._written.wait(timeout=left)
            batch, self._outcomes = self._outcomes[:WRITE_BATCH], self._outcomes[WRITE_BATCH:]
            return batch
