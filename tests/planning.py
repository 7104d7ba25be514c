"""Where the engine plans an endpoint's next baseline-interval run, for tests that run on
the real clock (a run starts a few ms after its slot)."""

from __future__ import annotations

from datetime import datetime, timedelta

from endpoints.models import Run


def planned_after(run: Run, interval: timedelta, floor: timedelta = timedelta(0)) -> datetime:
    """Start to start when on time; a late run's next slot of its own phase at least half
    an interval (and the minimum intervals, ``floor``) after its start
    (the governor's ``phase_slot``)."""
    late = run.started_at - run.scheduled_for
    gap = max(interval / 2, floor)
    if late <= timedelta(0) or gap >= interval:
        return run.started_at + interval
    planned = run.scheduled_for + interval
    while planned < run.started_at + gap:
        planned += interval
    return planned
