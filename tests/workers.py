"""One broker per pytest-xdist worker (``scripts/test`` runs the suite on several).

pytest-django gives each worker its own test database (``test_<name>_gw0``, ...); the
broker needs the same, or one worker's Celery fleet consumes another's ticks and one
worker's ``clear_broker`` empties another's queues. Each worker takes its own Redis
database, counted down from the configured one. Loaded with ``-p tests.workers``
(pyproject.toml), before the settings are read: a conftest comes too late.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit, urlunsplit

REDIS_DATABASES = 16


def worker_broker_url(url: str, worker: str) -> str:
    """``url`` on its own Redis database for ``worker`` ("gw0", "gw1", ...)."""
    parts = urlsplit(url)
    configured = int(parts.path.strip("/") or 0)
    own = (configured - 1 - int(worker.removeprefix("gw"))) % REDIS_DATABASES
    return urlunsplit(parts._replace(path=f"/{own}"))


if worker := os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["CELERY_BROKER_URL"] = worker_broker_url(
        os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/15"), worker
    )
