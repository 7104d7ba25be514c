"""manage.py runscheduler: tick, execution pool, maintenance and planner in one process."""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from endpoints.cpus import keep_to_the_scheduler_cores
from endpoints.embedded import EmbeddedScheduler, load_cycle
from endpoints.engine.dispatch import freeze_startup_heap
from endpoints.wording import count_words, duration_words

logger = logging.getLogger("cronicorn.scheduler")


def _positive(kind: type[float] | type[int]) -> Any:
    def parse(text: str) -> float | int:
        try:
            value = kind(text)
        except ValueError:
            raise CommandError(f"{text!r} is not a {kind.__name__}.") from None
        if value <= 0:
            raise CommandError(f"{text!r} must be above zero.")
        return value

    return parse


class Command(BaseCommand):
    help = (
        "Run the scheduler in one process without a broker: claim due endpoints every "
        "CRONICORN_TICK_SECONDS, run them on a thread pool at their scheduled time, sweep "
        "zombies, prune old runs and run the planner. SIGTERM or Ctrl-C stops claiming and "
        "waits up to CRONICORN_SHUTDOWN_TIMEOUT_SECONDS for runs in flight; if some are "
        "still running then, it exits with status 3 and says how many."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--duration",
            type=_positive(float),
            metavar="SECONDS",
            help="Run this long, then shut down as on SIGTERM (for demos and tests).",
        )
        parser.add_argument(
            "--max-in-flight",
            type=_positive(int),
            default=settings.CRONICORN_MAX_IN_FLIGHT,
            help="Runs in flight at once (default CRONICORN_MAX_IN_FLIGHT, "
            f"{settings.CRONICORN_MAX_IN_FLIGHT}).",
        )
        parser.add_argument(
            "--quiet",
            action="store_true",
            help="Log failures, recoveries and problems only, not a line per successful run.",
        )

    def handle(
        self,
        *args: Any,
        duration: float | None,
        max_in_flight: int,
        quiet: bool,
        **options: Any,
    ) -> None:
        if quiet:
            logger.setLevel(logging.WARNING)
        keep_to_the_scheduler_cores()  # before the scheduler's threads start
        stop = threading.Event()

        def request_stop(signum: int, frame: FrameType | None) -> None:
            name = signal.Signals(signum).name
            logger.info("%s received: no new claims; finishing runs in flight", name)
            stop.set()

        signal.signal(signal.SIGTERM, request_stop)
        signal.signal(signal.SIGINT, request_stop)

        scheduler = EmbeddedScheduler(
            max_in_flight=max_in_flight,
            plan_cycle=load_cycle("plan"),
            notify_cycle=load_cycle("notify"),
        )
        freeze_startup_heap()
        logger.info("scheduler started: at most %s in flight", count_words(max_in_flight, "run"))
        scheduler.run(stop, duration=duration)
        timeout = settings.CRONICORN_SHUTDOWN_TIMEOUT_SECONDS
        if scheduler.shutdown(timeout=timeout):
            logger.info("scheduler stopped cleanly")
            return
        left = scheduler.dispatcher.in_flight
        # Non-zero, so a supervisor (or a person) sees that runs were cut off.
        raise CommandError(
            f"{count_words(left, 'run')} still in flight after the "
            f"{duration_words(timeout * 1000)} shutdown timeout "
            "(CRONICORN_SHUTDOWN_TIMEOUT_SECONDS); exiting without them: their leases expire "
            "and the zombie sweep marks them lost, then their slots are retried.",
            returncode=3,
        )
