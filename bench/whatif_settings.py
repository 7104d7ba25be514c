"""Settings for the benchmarks' what-ifs: the product settings plus one change each,
chosen by environment variables (set by the scripts, never in production).

- ``BENCH_TICK_SECONDS`` (lateness.py ``--lead``): tick more often, with the product's
  horizon (two ticks of the product's 1 s since issue 23; the tick before that), so
  every slot is claimed that much further ahead; claims still start at their
  ``scheduled_for`` (the dispatcher holds them), so nothing runs early.

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
