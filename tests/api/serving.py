"""The REST API as production serves it: the web service's command from docker-compose.yml
(gunicorn with cronicorn_site/gunicorn.conf.py: its worker and its limits) and production
settings (DEBUG off), on the test database, started as a process on a free port and
waited for."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.compose import load_compose, service_command
from tests.engine_processes import child_database_url, process_env, running, wait_answering
from tests.http_targets import free_port


@contextmanager
def gunicorn_serving(logs: Path, **settings: str) -> Iterator[str]:
    """gunicorn answering (``settings``: more environment); its base URL. Stopped, and
    waited for, on the way out."""
    port = free_port()
    metrics = logs / "metrics"
    metrics.mkdir(parents=True, exist_ok=True)
    env = process_env(
        PATH=f"{Path(sys.executable).parent}:/usr/bin:/bin",
        DATABASE_URL=child_database_url(),
        DEBUG="false",
        DJANGO_SECRET_KEY="contract-test-secret-key-not-for-production-0123456789",
        DJANGO_ALLOWED_HOSTS="127.0.0.1",
        CRONICORN_ENV_FILE="",
        PROMETHEUS_MULTIPROC_DIR=str(metrics),
        PORT=str(port),
        # gunicorn binds 0.0.0.0:$PORT by default; loopback is enough here.
        GUNICORN_CMD_ARGS=f"--bind 127.0.0.1:{port}",
        **{"WEB_CONCURRENCY": "1", **settings},
    )
    command = service_command(load_compose()["services"]["web"], env)
    with running(command, env=env, log=logs / "gunicorn.log"):
        base_url = f"http://127.0.0.1:{port}"
        wait_answering(f"{base_url}/healthz", logs / "gunicorn.log")
        yield base_url
