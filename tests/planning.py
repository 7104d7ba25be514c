"""Where the engine plans an endpoint's next baseline-interval run, for tests that run on
the real clock (a run starts a few ms after its slot)."""

from __future__ import annotations

from datetime import datetime, timedelta

from endpoints.engine.outcomes import PHASE_KEEP_FRACTION, PHASE_KEEP_MAX
from endpoints.models import Run


def planned_after(run: Run, interval: timedelta) -> datetime:
    """Start to start, or from the slot when the run started a little late
    (``endpoints.engine.outcomes.keep_phase``; minimum intervals not in play)."""
    late = run.started_at - run.scheduled_for
    if timedelta(0) < late <= min(PHASE_KEEP_MAX, interval * PHASE_KEEP_FRACTION):
        return run.scheduled_for + interval
    return run.started_at + interval
