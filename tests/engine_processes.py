"""Real processes for the engine's end-to-end tests: Celery workers, beat, manage.py
commands, each with its own log file, always stopped at the end."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import httpx
import redis
from django.conf import settings
from django.db import connection

ROOT = Path(__file__).resolve().parent.parent
# Everything Celery keeps in the broker for our queues; cleared so that no message from an
# earlier run (an ETA task restored after a killed worker) leaks into a test.
BROKER_KEYS = ("tick", "execute", "maintenance", "planner", "notify", "unacked", "unacked_index")


def process_env(**overrides: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        DJANGO_SETTINGS_MODULE="cronicorn_site.settings",
        CRONICORN_ALLOW_PRIVATE_ADDRESSES="true",
        CRONICORN_LOG_LEVEL="WARNING",
        PYTHONUNBUFFERED="1",
    )
    env.update(overrides)
    return env


def child_database_url() -> str:
    """The URL of the database pytest-django created, for child processes."""
    db = connection.settings_dict
    if connection.vendor != "postgresql":
        raise RuntimeError("these scenarios need PostgreSQL")
    user = db.get("USER") or "postgres"
    return (
        f"postgres://{user}@{db.get('HOST') or '127.0.0.1'}:{db.get('PORT') or 5432}/{db['NAME']}"
    )


def clear_broker() -> None:
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    client.delete(*BROKER_KEYS)


@contextmanager
def running(
    args: Sequence[str], *, env: dict[str, str], log: Path
) -> Iterator[subprocess.Popen[bytes]]:
    """Start a process; on exit SIGTERM it (SIGKILL after 15 s) and reap it."""
    with log.open("ab") as out:
        process = subprocess.Popen(
            list(args),
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield process
    finally:
        stop(process)


def stop(process: subprocess.Popen[bytes], *, timeout: float = 15) -> int:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
    return process.returncode


def manage(*args: str) -> list[str]:
    return [sys.executable, "manage.py", *args]


def celery_worker(queues: Sequence[str], *, concurrency: int = 4) -> tuple[list[str], str]:
    name = f"engine-{uuid.uuid4().hex[:8]}@localhost"
    args = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "cronicorn_site",
        "worker",
        "-P",
        "threads",
        "-c",
        str(concurrency),
        "-Q",
        ",".join(queues),
        "-n",
        name,
        "-l",
        "warning",
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
    ]
    return args, name


def celery_beat(schedule_file: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "cronicorn_site",
        "beat",
        "-s",
        str(schedule_file),
        "--pidfile=",
        "-l",
        "warning",
    ]


def wait_for_workers(names: Sequence[str], *, timeout: float = 60) -> None:
    from cronicorn_site.celery import app

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        replies = app.control.ping(destination=list(names), timeout=0.5)
        answered = {name for reply in replies for name in reply}
        if answered >= set(names):
            return
    raise AssertionError(f"Celery workers {names} did not answer a ping within {timeout} s")


def wait_answering(url: str, log: Path, *, timeout: float = 30) -> None:
    """Until ``url`` answers at all (a server process started: Django loaded, port bound);
    the end of its ``log`` in the failure otherwise."""

    def answers() -> bool:
        try:
            httpx.get(url, timeout=1)
        except httpx.TransportError:
            return False
        return True

    if not wait_until(answers, timeout=timeout, every=0.1):
        raise AssertionError(f"{url} did not answer in {timeout} s:\n{log.read_text()[-3000:]}")


def wait_until(condition, *, timeout: float, every: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(every)
    return bool(condition())
