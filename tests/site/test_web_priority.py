"""The web processes yield the CPU to the scheduler on a shared machine
(CRONICORN_WEB_NICE): gunicorn's workers (not its arbiter) and ``manage.py mcp --http``
run that much nicer than the process that started them, so a tenant's load on the API
does not make another tenant's runs late (bench/noisy_neighbour.py measures it)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.api.serving import gunicorn_serving
from tests.mcp.serving import mcp_over_http

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def processes_started_with(text: str) -> dict[int, int]:
    """pid -> nice value of every process whose command line or environment holds
    ``text``."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            seen = (entry / "cmdline").read_bytes() + (entry / "environ").read_bytes()
            if text.encode() in seen.replace(b"\0", b" "):
                found[int(entry.name)] = os.getpriority(os.PRIO_PROCESS, int(entry.name))
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue  # ended while we looked
    return found


def test_gunicorns_workers_run_nicer_than_its_arbiter(tmp_path: Path) -> None:
    own = os.getpriority(os.PRIO_PROCESS, 0)
    with gunicorn_serving(tmp_path, WEB_CONCURRENCY="2", CRONICORN_WEB_NICE="7") as url:
        port = url.rsplit(":", 1)[1]
        nice = sorted(processes_started_with(f"--bind 127.0.0.1:{port}").values())
    assert nice == [own, min(own + 7, 19), min(own + 7, 19)]  # the arbiter, two workers


def test_the_mcp_http_server_runs_nicer(tmp_path: Path) -> None:
    own = os.getpriority(os.PRIO_PROCESS, 0)
    with mcp_over_http(tmp_path / "mcp.log", CRONICORN_WEB_NICE="5") as url:
        port = url.rsplit(":", 1)[1].split("/")[0]
        nice = list(processes_started_with(f"--port {port}").values())
    assert nice == [min(own + 5, 19)]
