"""A run planned before the next tick is claimed before it is due: the writer wakes the
tick of ``runscheduler`` (``EmbeddedScheduler._planned``).

An endpoint every second plans its next slot from the run that just ended, so a tick
between that run's start and its record sees no next slot; the slot waited for the tick
after, late by up to the write's latency with 1 s ticks (issue 32 found such slots up to
66 ms late beside a busy tenant), and by up to a whole tick with longer ones.
"""

from __future__ import annotations

import threading
from itertools import pairwise

from django.utils import timezone

from endpoints.embedded import EmbeddedScheduler
from endpoints.models import Run


def test_an_endpoint_every_second_runs_on_time_between_ticks_five_seconds_apart(
    transactional_db, make_endpoint, target, settings
):
    settings.CRONICORN_TICK_SECONDS = 5.0
    settings.CRONICORN_CLAIM_HORIZON_MS = 10_000
    endpoint = make_endpoint(
        url=target.url("/every-second"), baseline_interval_ms=1_000, next_run_at=timezone.now()
    )
    scheduler = EmbeddedScheduler(max_in_flight=4)
    stop = threading.Event()
    loop = threading.Thread(target=scheduler.run, args=(stop,))
    loop.start()
    try:
        # Without the early tick: the first slot at once, the next at the tick 5 s later.
        assert target.wait_for(lambda: len(target.hits("/every-second")) >= 4, timeout=20)
    finally:
        stop.set()
        loop.join(timeout=10)
        scheduler.shutdown(timeout=10)

    runs = list(Run.objects.filter(endpoint=endpoint).order_by("scheduled_for")[:4])
    late = [(run.started_at - run.scheduled_for).total_seconds() for run in runs]
    assert len(runs) == 4 and max(late) < 1.0, late
    gaps = [(b.scheduled_for - a.scheduled_for).total_seconds() for a, b in pairwise(runs)]
    assert all(0.9 < gap < 1.5 for gap in gaps), gaps
