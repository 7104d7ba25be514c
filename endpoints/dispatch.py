"""Start claims on time: a timer holds each claim until its ``scheduled_for``, then a
pool of threads executes it, and one writer records the runs that finish together.

One dispatcher per process: the Celery execute task hands it the claims of a chunk,
``runscheduler`` hands it every claim of a tick. One timer thread sleeps until the
earliest claim is due (a heap, not a sleeping thread per claim), so pool threads only
ever do real work and a claim starts within a millisecond or so of its time.

A pool thread records the Run and calls the endpoint (``scheduling.call_claim``); the
outcome then waits up to ``WRITE_LINGER`` for others, and the writer thread finishes
them all in one transaction (``scheduling.record_outcomes``). Written one by one, the
finish and reschedule were two of the four transactions every run cost (bench/README.md
has the figures). The wait delays only the write, never a start; a claim's future
resolves once its run is written.

The pool is our own small one rather than ``ThreadPoolExecutor``: each thread keeps its
database connection between claims (a new PostgreSQL connection per run would cost
more than the run) and closes it when the pool stops, and the threads are daemons, so
a shutdown that gives up on a hung request is not then blocked by it at exit.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import wait as wait_for_futures
from typing import Any

from django.db import close_old_connections, connections

from endpoints.models import Run
from endpoints.scheduling import Claim, Outcome, call_claim, record_outcomes

logger = logging.getLogger("cronicorn.scheduler")

# How long a finished run's outcome may wait for others to share its transaction, and
# how many share one at most. Saturated (bench/throughput.py), a transaction carried
# ≈ 17 runs on average; a quiet scheduler writes each run ≤ 20 ms after it ends.
WRITE_LINGER = 0.02
WRITE_BATCH = 50


def call_safely(claim: Claim) -> Outcome | Run | None:
    """Call one claim on a pool thread; nothing escapes to the pool or other claims."""
    close_old_connections()  # this thread's connection may have gone stale between claims
    try:
        return call_claim(claim)
    except Exception:
        ids = {"endpoint_id": claim.endpoint_id, "claim_token": str(claim.claim_token)}
        logger.exception("claim failed", extra={**ids, "source": claim.source})
        return None


def record(outcomes: list[Outcome]) -> None:
    close_old_connections()  # the writer's connection may have gone stale between batches
    record_outcomes(outcomes)


class ClaimDispatcher:
    def __init__(
        self,
        *,
        threads: int,
        call: Callable[[Claim], Outcome | Run | None] = call_safely,
        record: Callable[[list[Outcome]], Any] = record,
    ) -> None:
        self._call = call
        self._record = record
        self._condition = threading.Condition()
        self._heap: list[tuple[float, int, Claim, Future[Any]]] = []
        self._order = itertools.count()
        self._in_flight: set[Future[Any]] = set()
        self._closed = False
        self._work: queue.SimpleQueue[tuple[Claim, Future[Any]] | None] = queue.SimpleQueue()
        self._workers = [
            threading.Thread(target=self._work_loop, name=f"cronicorn-run-{k}", daemon=True)
            for k in range(threads)
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
        for thread in (*self._workers, self._timer, self._writer):
            thread.start()

    def submit(self, claim: Claim) -> Future[Any]:
        """Execute ``claim`` at its scheduled time (at once if that has passed)."""
        future: Future[Any] = Future()
        with self._condition:
            if self._closed:
                raise RuntimeError("The dispatcher is shut down; no new claims.")
            entry = (claim.scheduled_for.timestamp(), next(self._order), claim, future)
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
            entry[3].cancel()
        return [entry[2] for entry in sorted(entries)]

    def shutdown(self, *, timeout: float) -> bool:
        """Stop the timer and wait up to ``timeout`` s for runs in flight; True if all ended.

        Claims still pending should be taken back with ``drain_pending`` first.
        """
        with self._condition:
            self._closed = True
            running = set(self._in_flight)
            self._condition.notify()
        with self._written:
            self._lingering = False
            self._written.notify()
        deadline = time.monotonic() + timeout
        _done, not_done = wait_for_futures(running, timeout=timeout)
        for _worker in self._workers:
            self._work.put(None)  # each worker exits after the work queued before it
        for worker in self._workers:
            worker.join(timeout=max(deadline - time.monotonic(), 0))
        with self._written:
            self._writing = False  # the writer writes what is left, then exits
            self._written.notify()
        self._writer.join(timeout=max(deadline - time.monotonic(), 0))
        return not not_done

    def _run_timer(self) -> None:
        with self._condition:
            while not self._closed:
                if not self._heap:
                    self._condition.wait()
                    continue
                delay = self._heap[0][0] - time.time()
                if delay > 0:
                    self._condition.wait(timeout=delay)
                    continue
                _at, _order, claim, future = heapq.heappop(self._heap)
                self._start(claim, future)

    def _start(self, claim: Claim, future: Future[Any]) -> None:
        """Called with the condition held."""
        self._in_flight.add(future)
        future.add_done_callback(self._forget)
        self._work.put((claim, future))

    def _forget(self, future: Future[Any]) -> None:
        with self._condition:
            self._in_flight.discard(future)

    def _work_loop(self) -> None:
        try:
            while (item := self._work.get()) is not None:
                claim, future = item
                if not future.set_running_or_notify_cancel():
                    continue
                try:
                    called = self._call(claim)
                except BaseException as exc:
                    future.set_exception(exc)
                    continue
                if isinstance(called, Outcome):
                    self._hand_to_writer(called, future)
                else:
                    future.set_result(called)
        finally:
            connections.close_all()

    def _hand_to_writer(self, outcome: Outcome, future: Future[Any]) -> None:
        with self._written:
            if self._writing:
                self._outcomes.append((outcome, future, time.monotonic()))
                # The writer sleeps until the first outcome, then lingers; wake it early
                # only when a full batch is waiting.
                if len(self._outcomes) in (1, WRITE_BATCH):
                    self._written.notify()
                return
        # A run that outlived a shutdown's wait: the writer is gone, write it here.
        self._write([(outcome, future, 0.0)])

    def _write_loop(self) -> None:
        try:
            while batch := self._next_batch():
                self._write(batch)
        finally:
            connections.close_all()

    def _write(self, batch: list[tuple[Outcome, Future[Any], float]]) -> None:
        """Record the batch, then resolve its futures, whatever happened: a caller (a
        Celery execute task) must never wait forever."""
        try:
            self._record([outcome for outcome, _future, _at in batch])
        except Exception:
            logger.exception("could not record %d run(s); their leases will expire", len(batch))
        for outcome, future, _at in batch:
            future.set_result(outcome.run)

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
