"""Settings for the lateness what-if: claim each slot ahead of its time.

The product settings keep the claim horizon at or below the tick (1 s and 1 s), so a
slot that falls just after a tick boundary is only claimed when that tick actually runs,
and it starts late by the tick's own latency (beat, queue, claim, commit, publish). Here
the tick runs every 0.5 s while the horizon stays 1 s: every slot is claimed at least
0.5 s before it is due. Claims still start at their ``scheduled_for`` (the dispatcher
holds them), so nothing runs early.

    DJANGO_SETTINGS_MODULE=bench.lead_settings (set by lateness.py --lead)
"""

from __future__ import annotations

from cronicorn_site.settings import *  # noqa: F403
from cronicorn_site.settings import CELERY_BEAT_SCHEDULE

CRONICORN_TICK_SECONDS = 0.5
CELERY_BEAT_SCHEDULE = {
    **CELERY_BEAT_SCHEDULE,
    "tick": {
        "task": "cronicorn.tick",
        "schedule": CRONICORN_TICK_SECONDS,
        "options": {"expires": CRONICORN_TICK_SECONDS},
    },
}
