"""Start claims on time: a timer holds each claim until its ``scheduled_for``, then a
pool of threads executes it.

One dispatcher per process: the Celery execute task hands it the claims of a chunk,
``runscheduler`` hands it every claim of a tick. One timer thread sleeps until the
earliest claim is due (a heap, not a sleeping thread per claim), so pool threads only
ever do real work and a claim starts within a millisecond or so of its time.

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
from endpoints.scheduling import Claim, execute_claim

logger = logging.getLogger("cronicorn.scheduler")


def run_claim(claim: Claim) -> Run | None:
    """Execute one claim on a pool thread; nothing escapes to the pool or other claims."""
    close_old_connections()  # this thread's connection may have gone stale between claims
    try:
        return execute_claim(claim)
    except Exception:
        ids = {"endpoint_id": claim.endpoint_id, "claim_token": str(claim.claim_token)}
        logger.exception("claim failed", extra={**ids, "source": claim.source})
        return None


class ClaimDispatcher:
    def __init__(self, *, threads: int, execute: Callable[[Claim], Any] = run_claim) -> None:
        self._execute = execute
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
        for thread in (*self._workers, self._timer):
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
        deadline = time.monotonic() + timeout
        _done, not_done = wait_for_futures(running, timeout=timeout)
        for _worker in self._workers:
            self._work.put(None)  # each worker exits after the work queued before it
        for worker in self._workers:
            worker.join(timeout=max(deadline - time.monotonic(), 0))
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
                    future.set_result(self._execute(claim))
                except BaseException as exc:
                    future.set_exception(exc)
        finally:
            connections.close_all()
