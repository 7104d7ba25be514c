"""Gunicorn settings for the web process: ``gunicorn -c cronicorn_site/gunicorn.conf.py ...``.

Everything else comes from gunicorn's own environment variables: ``PORT`` (binds
0.0.0.0:$PORT), ``WEB_CONCURRENCY`` (worker processes) and ``GUNICORN_CMD_ARGS``.
"""

from __future__ import annotations

import copy
import os
from typing import Any

from django.conf import settings

# Django settings are read lazily, on the first attribute below.
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "cronicorn_site.settings")

# Gunicorn's own lines (boot, worker timeouts, access) in the same format as the app's.
_GUNICORN_LOGGER = {"handlers": ["console"], "level": "INFO", "propagate": False}
logconfig_dict: dict[str, Any] = copy.deepcopy(settings.LOGGING)
logconfig_dict["loggers"]["gunicorn.error"] = _GUNICORN_LOGGER
logconfig_dict["loggers"]["gunicorn.access"] = _GUNICORN_LOGGER

# The worker heartbeat file lives in memory: on a container's overlay file system a slow
# disk write can make the arbiter think a healthy worker hung.
if os.path.isdir("/dev/shm"):  # noqa: S108 (a tmpfs, not a shared temp directory)
    worker_tmp_dir = "/dev/shm"  # noqa: S108

# Answer in-flight requests before stopping, within docker's default 10 s stop grace.
graceful_timeout = 8

# No `gunicornc` control socket: it would live in $HOME, which is read-only in the image
# and shared by every gunicorn on a development machine.
control_socket_disable = True

# The server's own limits (settings: the OpenAPI document states them too), and a worker
# that refuses a request over them with a problem (cronicorn_site/gunicorn_worker.py).
worker_class = "cronicorn_site.gunicorn_worker.ProblemWorker"
limit_request_line = settings.CRONICORN_WEB_MAX_REQUEST_LINE
limit_request_field_size = settings.CRONICORN_WEB_MAX_HEADER_BYTES
limit_request_fields = settings.CRONICORN_WEB_MAX_HEADERS


def post_fork(server: Any, worker: Any) -> None:
    """Each worker yields the CPU to the scheduler (CRONICORN_WEB_NICE, CRONICORN_WEB_CPUS);
    the arbiter, which only watches them, keeps its priority."""
    from endpoints.cpus import yield_to_the_scheduler

    yield_to_the_scheduler()
