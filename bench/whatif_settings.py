"""Settings for the benchmarks' what-ifs: the product settings plus one change each,
chosen by environment variables (set by the scripts, never in production).

- ``BENCH_TICK_SECONDS`` (lateness.py ``--lead``): tick more often than the claim
  horizon. The product keeps the horizon at or below the tick (1 s and 1 s), so a slot
  just after a tick boundary is only claimed when that tick actually runs and starts
  late by the tick's own latency (beat, queue, claim, commit, publish). With a 0.5 s
  tick and the 1 s horizon every slot is claimed at least 0.5 s ahead; claims still
  start at their ``scheduled_for`` (the dispatcher holds them), so nothing runs early.

    DJANGO_SETTINGS_MODULE=bench.whatif_settings
"""

from __future__ import annotations

import os

from cronicorn_site.settings import *  # noqa: F403
from cronicorn_site.settings import CELERY_BEAT_SCHEDULE

if tick := os.environ.get("BENCH_TICK_SECONDS"):
    CRONICORN_TICK_SECONDS = float(tick)
    CELERY_BEAT_SCHEDULE = {
        **CELERY_BEAT_SCHEDULE,
        "tick": {
            "task": "cronicorn.tick",
            "schedule": CRONICORN_TICK_SECONDS,
            "options": {"expires": CRONICORN_TICK_SECONDS},
        },
    }
