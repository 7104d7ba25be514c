"""Progress bars on the long commands (endpoints/management/commands/_progress.py): under
a terminal (a pty) import_endpoints, export_endpoints and cleanup_runs show a bar per
stage on stderr; through a pipe the same commands print exactly what they printed before,
no bar and no carriage return. TQDM_DELAY=0 (tqdm's own variable) shows a bar at once, so
that no test depends on a command lasting the second the bars otherwise wait for."""

from __future__ import annotations

import fcntl
import os
import select
import struct
import subprocess
import termios
import time
from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from django.utils import timezone

from endpoints.models import Endpoint, Job, Run, RunStatus, Tenant
from tests.engine_processes import ROOT, child_database_url, manage, process_env

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]
ENDPOINTS = 150


def command_env() -> dict[str, str]:
    return process_env(DATABASE_URL=child_database_url(), TQDM_DELAY="0")


def in_a_terminal(args: list[str], env: dict[str, str], *, timeout: float = 120) -> tuple[int, str]:
    """Run ``args`` with stdin, stdout and stderr on a pty; its exit code and all it wrote."""
    master, slave = os.openpty()
    # A terminal of 24 rows and 100 columns (a new pty has 0: a bar of no width).
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    process = subprocess.Popen(args, stdin=slave, stdout=slave, stderr=slave, env=env, cwd=ROOT)
    os.close(slave)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1)
            if not ready:
                continue
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        else:
            process.kill()
            raise AssertionError(f"{args} did not finish in {timeout} s")
    finally:
        os.close(master)
    return process.wait(timeout=30), b"".join(chunks).decode("utf-8", "replace")


def through_a_pipe(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, env=env, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )


def a_file(tmp_path: Path, tenant: str) -> Path:
    endpoints = [
        {"name": f"e{i:04}", "url": f"https://example.com/{i}", "baseline_interval": "5m"}
        for i in range(ENDPOINTS)
    ]
    document = {
        "version": 1,
        "tenants": [
            {
                "name": tenant,
                "max_endpoints": 1000,
                "jobs": [{"name": "bulk", "endpoints": endpoints}],
            }
        ],
    }
    path = tmp_path / f"{tenant}.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def assert_no_bar(text: str) -> None:
    assert "\r" not in text and "it/s" not in text and "%|" not in text, text[-500:]


def test_import_shows_its_stages_in_a_terminal_and_nothing_more_in_a_pipe(
    tmp_path: Path,
) -> None:
    env = command_env()
    code, seen = in_a_terminal(manage("import_endpoints", str(a_file(tmp_path, "Tty"))), env)
    assert code == 0, seen
    assert "Checking" in seen and "Writing" in seen and f"/{ENDPOINTS}" in seen
    assert f"{ENDPOINTS + 2} created, 0 updated" in seen  # the tenant, its job, the endpoints

    piped = through_a_pipe(manage("import_endpoints", str(a_file(tmp_path, "Pipe"))), env)
    assert piped.returncode == 0, piped.stderr
    assert piped.stderr == ""
    assert_no_bar(piped.stdout)
    lines = piped.stdout.splitlines()
    assert lines[0] == "+ tenant Pipe: created" and len(lines) == ENDPOINTS + 3
    assert lines[-1] == f"{ENDPOINTS + 2} created, 0 updated, 0 archived, 0 unchanged."
    assert Endpoint.objects.filter(job__tenant__name="Pipe").count() == ENDPOINTS


def test_export_shows_a_bar_in_a_terminal_and_writes_the_same_file_to_a_pipe(
    tmp_path: Path,
) -> None:
    tenant = Tenant.objects.create(name="Acme", max_endpoints=1000)
    job = Job.objects.create(tenant=tenant, name="bulk")
    Endpoint.objects.bulk_create(
        Endpoint(
            job=job, name=f"e{i:04}", url=f"https://example.com/{i}", baseline_interval_ms=300_000
        )
        for i in range(ENDPOINTS)
    )
    env = command_env()
    code, seen = in_a_terminal(manage("export_endpoints"), env)
    assert code == 0, seen
    assert "Exporting" in seen and f"/{ENDPOINTS} [" in seen

    piped = through_a_pipe(manage("export_endpoints"), env)
    assert piped.returncode == 0 and piped.stderr == ""
    assert_no_bar(piped.stdout)
    document = yaml.safe_load(piped.stdout)
    assert len(document["tenants"][0]["jobs"][0]["endpoints"]) == ENDPOINTS


def test_cleanup_shows_the_runs_deleted_in_a_terminal_and_one_line_in_a_pipe() -> None:
    tenant = Tenant.objects.create(name="Acme")
    job = Job.objects.create(tenant=tenant, name="ops")
    endpoint = Endpoint.objects.create(
        job=job, name="old", url="https://example.com/", baseline_interval_ms=300_000
    )
    long_ago = timezone.now() - timedelta(days=400)

    def old_runs(first: int) -> None:
        Run.objects.bulk_create(
            Run(
                endpoint=endpoint,
                trigger="scheduled",
                source="baseline-interval",
                scheduled_for=long_ago + timedelta(minutes=i),
                started_at=long_ago + timedelta(minutes=i),
                finished_at=long_ago + timedelta(minutes=i, seconds=1),
                status=RunStatus.SUCCESS,
            )
            for i in range(first, first + 300)
        )

    env = command_env()
    old_runs(0)
    code, seen = in_a_terminal(manage("cleanup_runs", "--older-than", "30d"), env)
    assert code == 0, seen
    assert "Deleting" in seen and " runs" in seen
    assert "Deleted " in seen

    old_runs(1000)  # the latest runs were kept
    piped = through_a_pipe(manage("cleanup_runs", "--older-than", "30d"), env)
    assert piped.returncode == 0 and piped.stderr == ""
    assert_no_bar(piped.stdout)
    (line,) = piped.stdout.splitlines()
    assert line.startswith("Deleted ") and line.endswith(" UTC.")
