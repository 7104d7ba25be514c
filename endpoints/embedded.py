"""The whole scheduler in one process, no broker (``manage.py runscheduler``).

A tick loop claims what is due and hands each claim to a ``ClaimDispatcher``, which
starts it at its scheduled time on a thread pool; a maintenance loop sweeps zombies and
prunes old runs; a planner loop and a notify loop run the cycles that
``CRONICORN_EMBEDDED_CYCLES`` names (the planner's and the alerts', wired by the site's
settings, so this app never imports those above it). They call the very functions the
Celery tasks call.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.apps import apps
from django.conf import settings
from django.db import connections
from django.utils import timezone
from django.utils.module_loading import import_string

from endpoints import health
from endpoints.engine import claiming, maintenance
from endpoints.engine.backfilling import BackfillRunner
from endpoints.engine.dispatch import ClaimDispatcher
from endpoints.wording import duration_words

logger = logging.getLogger("cronicorn.scheduler")

PRUNE_EVERY_SECONDS = 3600.0
BACKFILL_PASS_SECONDS = 0.25
# The summary line: once a minute, when at least this many runs happened in it (fewer
# are read line by line).
SUMMARY_SECONDS = 60.0
SUMMARY_MIN_RUNS = 20
# A run the writer planned before the next tick wakes the tick early (``_tick_loop``),
# at most this often: a burst of such plans costs a claim pass per this, not per run.
EARLY_TICK_GAP = 0.1
# How often the tick loop, waiting, looks whether it was told to stop.
STOP_POLL = 0.2


def load_cycle(name: str) -> Callable[..., Any] | None:
    """The cycle function ``CRONICORN_EMBEDDED_CYCLES[name]`` names, or None when it names
    none or its app is not installed (that loop is then off)."""
    path = settings.CRONICORN_EMBEDDED_CYCLES.get(name, "")
    if not path or not apps.is_installed(path.split(".", 1)[0]):
        logger.info("no %s cycle is installed; its loop is off", name)
        return None
    cycle: Callable[..., Any] = import_string(path)
    return cycle


class EmbeddedScheduler:
    def __init__(
        self,
        *,
        max_in_flight: int,
        plan_cycle: Callable[..., Any] | None = None,
        notify_cycle: Callable[..., Any] | None = None,
    ) -> None:
        self.dispatcher = ClaimDispatcher(max_in_flight=max_in_flight, on_planned=self._planned)
        self.backfills = BackfillRunner()
        self.plan_cycle = plan_cycle
        self.notify_cycle = notify_cycle
        self._last_prune = float("-inf")
        self._next_tick = float("inf")  # epoch seconds of the tick loop's next turn
        self._tick_soon = threading.Event()

    # --- Work units (one pass each; tests call them) ---

    def tick_once(self, *, now: datetime | None = None) -> bool:
        """Claim what is due and hand it to the dispatcher; True if anything was claimed."""
        return bool(claiming.tick(now=now, dispatch=self._submit_all))

    def _submit_all(self, claims: list[claiming.Claim]) -> None:
        for claim in claims:
            self.dispatcher.submit(claim)

    def _planned(self, at: datetime) -> None:
        """The writer planned a run for ``at``. Before the tick loop's next turn, that turn
        would claim it late: an endpoint every second plans its next slot from the run
        that just ended, and a tick between that run's start and its record sees no slot.
        The tick comes early instead (issue 32: B's latest slots beside a busy tenant A,
        whose outcomes make the writer slower, were these, up to 66 ms late)."""
        if at.timestamp() < self._next_tick:
            self._tick_soon.set()

    def backfill_once(self, *, now: datetime | None = None) -> int:
        """One pass of the backfill loop; returns how many backfill runs it started."""
        return self.backfills.run_once(now=now)

    def maintain_once(self, *, now: datetime | None = None) -> int:
        """Sweep zombies, and prune old runs once an hour; returns the runs marked lost."""
        now = now or timezone.now()
        lost = maintenance.sweep_zombies(now=now)
        maintenance.end_signing_grace(now=now)
        if time.monotonic() - self._last_prune >= PRUNE_EVERY_SECONDS:
            self._last_prune = time.monotonic()
            maintenance.retention_cycle(now=now)
        return lost

    def plan_once(self, *, now: datetime | None = None) -> int:
        """One planner cycle; returns the sessions run. Never raises: a planner problem
        must not stop the scheduler."""
        if self.plan_cycle is None:
            return 0
        try:
            return len(self.plan_cycle(now=now or timezone.now()))
        except Exception:
            logger.exception("planner cycle failed; the next one runs on schedule")
            return 0

    def notify_once(self, *, now: datetime | None = None) -> None:
        """One alerts cycle. Never raises: a dead channel must not stop the scheduler."""
        if self.notify_cycle is None:
            return
        try:
            self.notify_cycle(now=now or timezone.now())
        except Exception:
            logger.exception("notify cycle failed; the next one runs on schedule")

    def summarize_once(self, *, now: datetime | None = None) -> None:
        """The minute's one-line summary, when runs are too frequent to read line by line."""
        summary = health.minute_summary(now=now or timezone.now())
        if summary["runs"] >= SUMMARY_MIN_RUNS:
            logger.info(
                "last minute: %d runs, %d failed, lateness p95 %s, %d in flight",
                summary["runs"],
                summary["failures"],
                duration_words(summary["lateness_p95_ms"]),
                self.dispatcher.in_flight,
                extra={**summary, "in_flight": self.dispatcher.in_flight},
            )

    # --- Loops ---

    def run(self, stop: threading.Event, *, duration: float | None = None) -> None:
        """Tick until ``stop`` is set or ``duration`` seconds pass; then return (call
        ``shutdown`` next)."""
        if duration is not None:
            timer = threading.Timer(duration, stop.set)
            timer.daemon = True
            timer.start()
        side_loops = [
            # Small passes often, so a backfill's work comes in small pieces between runs.
            (self.backfill_once, BACKFILL_PASS_SECONDS, "backfill"),
            (self.maintain_once, float(settings.CRONICORN_MAINTENANCE_SECONDS), "maintenance"),
            (self.plan_once, float(settings.CRONICORN_PLANNER_SECONDS), "planner"),
            (self.notify_once, settings.CRONICORN_NOTIFY_SECONDS, "notify"),
            (self.summarize_once, SUMMARY_SECONDS, "summary"),
        ]
        for work, every, name in side_loops:
            if (work is self.plan_once and self.plan_cycle is None) or (
                work is self.notify_once and self.notify_cycle is None
            ):
                continue
            thread = threading.Thread(
                target=_repeat, args=(work, every, stop, name), name=f"cronicorn-{name}"
            )
            thread.daemon = True
            thread.start()
        self._tick_loop(stop)

    def _tick_loop(self, stop: threading.Event) -> None:
        """Tick at a fixed rate until ``stop``, and early (``_planned``) when a run was
        planned before the next turn, at most every ``EARLY_TICK_GAP``; the turns at the
        fixed rate stay where they are. Errors are logged and the loop goes on."""
        every = settings.CRONICORN_TICK_SECONDS
        next_at = time.monotonic()
        try:
            while not stop.is_set():
                now = time.monotonic()
                if now >= next_at:  # this pass is a turn at the fixed rate
                    next_at = max(next_at + every, now)
                # Set before the pass: a run planned during it, due before the next turn,
                # wakes the loop again. Cleared before the claim: a plan recorded (and
                # told) before the claim's read is claimed by this pass.
                self._next_tick = time.time() + (next_at - now)
                self._tick_soon.clear()
                try:
                    self.tick_once()
                except Exception:
                    logger.exception("tick loop failed; retrying at its next turn")
                early = time.monotonic() + EARLY_TICK_GAP
                while not stop.is_set() and (left := next_at - time.monotonic()) > 0:
                    if self._tick_soon.wait(min(left, STOP_POLL)):
                        stop.wait(max(0.0, min(early, next_at) - time.monotonic()))
                        break
        finally:
            connections.close_all()

    def shutdown(self, *, timeout: float) -> bool:
        """Stop starting runs, give back claims not started, wait for runs in flight.

        Returns True when every run in flight finished within ``timeout`` seconds.
        """
        pending = self.dispatcher.drain_pending()
        if pending:
            claiming.release_claims(pending)
            logger.info("released %d claim(s) that had not started", len(pending))
        backfills_done = self.backfills.shutdown(timeout=timeout)
        return self.dispatcher.shutdown(timeout=timeout) and backfills_done


def _repeat(work: Callable[[], Any], every: float, stop: threading.Event, name: str) -> None:
    """Call ``work`` at a fixed rate until ``stop``; errors (a database restart) are logged
    and the loop goes on."""
    next_at = time.monotonic()
    try:
        while not stop.is_set():
            try:
                work()
            except Exception:
                logger.exception("%s loop failed; retrying at its next turn", name)
            next_at = max(next_at + every, time.monotonic())
            stop.wait(next_at - time.monotonic())
    finally:
        connections.close_all()
