"""The production process lines, started here without Docker, schedule a real endpoint.

The commands are read from docker-compose.yml (so they are the same lines the
deployment runs): migrate, gunicorn, the MCP server, celery beat and the tick, execute,
planner and notify workers, against a PostgreSQL database made for this test and the test
Redis. Then an endpoint on a local HTTP server runs end to end; /readyz is 200; every
service's compose healthcheck passes; /metrics shows the run; the run's log lines are
found by its claim token and run id, from claim to reschedule; and once beat stops,
/readyz turns 503 within its tick-age threshold and beat's healthcheck fails, as does a
stopped worker's.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import psycopg
import pytest
import redis
from django.conf import settings
from django.db import connection
from pytest_httpserver import HTTPServer

from cronicorn_site.celery import app
from tests.compose import REPO, interpolate, load_compose, service_command
from tests.http_targets import free_port

pytestmark = pytest.mark.slow

TOKEN = "process-test-metrics-token"
MAX_TICK_AGE = 3
SERVICES = (
    "web",
    "mcp",
    "beat",
    "worker-tick",
    "worker-execute",
    "worker-planner",
    "worker-notify",
)
WORKERS = {
    "worker-tick": "tick",
    "worker-execute": "execute",
    "worker-planner": "planner",
    "worker-notify": "notify",
}
# Our queues and Celery's bookkeeping in the broker; cleared so no earlier message leaks in.
BROKER_KEYS = (
    "tick",
    "execute",
    "maintenance",
    "planner",
    "notify",
    "unacked",
    "unacked_index",
)
T = TypeVar("T")


def wait_for(what: str, probe: Callable[[], T | None], *, timeout: float, logs: Path) -> T:
    """Poll ``probe`` until it returns something, or fail saying what never happened."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value is not None and value is not False:
            return value
        time.sleep(0.2)
    raise AssertionError(f"{what} within {timeout} s.\n{log_tails(logs)}")


def log_tails(logs: Path, lines: int = 15) -> str:
    tails = []
    for log in sorted(logs.glob("*.log")):
        tail = log.read_text(errors="replace").splitlines()[-lines:]
        tails.append(f"--- {log.name}\n" + "\n".join(tail))
    return "\n".join(tails)


@pytest.fixture
def process_database() -> Iterator[str]:
    """A fresh database the processes share, named after this run's test database."""
    db = connection.settings_dict
    name = f"{db['NAME']}_processes"
    server = (
        f"{db.get('USER') or 'postgres'}@{db.get('HOST') or '127.0.0.1'}:{db.get('PORT') or 5432}"
    )
    admin_url = f"postgresql://{server}/postgres"
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')
    yield f"postgresql://{server}/{name}"
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def process_env(process_database: str, tmp_path: Path) -> dict[str, str]:
    redis.Redis.from_url(settings.CELERY_BROKER_URL).delete(*BROKER_KEYS)
    port = free_port()
    metrics_dir = tmp_path / "metrics"
    metrics_dir.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CRONICORN_", "DJANGO_"))}
    env.update(
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        DJANGO_SETTINGS_MODULE="cronicorn_site.settings",
        DEBUG="false",
        DJANGO_SECRET_KEY="process-test-secret-key-not-for-production-0123456789",
        DJANGO_ALLOWED_HOSTS="127.0.0.1,localhost",
        DATABASE_URL=process_database.replace("postgresql://", "postgres://", 1),
        CELERY_BROKER_URL=settings.CELERY_BROKER_URL,
        PROMETHEUS_MULTIPROC_DIR=str(metrics_dir),
        CRONICORN_METRICS_TOKEN=TOKEN,
        CRONICORN_READY_MAX_TICK_AGE_SECONDS=str(MAX_TICK_AGE),
        # The target is on 127.0.0.1, which production refuses.
        CRONICORN_ALLOW_PRIVATE_ADDRESSES="true",
        CRONICORN_LOG_FORMAT="json",
        CRONICORN_LOG_LEVEL="DEBUG",
        CRONICORN_EXECUTE_CONCURRENCY="4",
        CRONICORN_MAX_IN_FLIGHT="4",
        PORT=str(port),
        # The mcp service's address and port, which compose interpolates into its lines.
        MCP_HOST="127.0.0.1",
        MCP_PORT=str(free_port()),
        # gunicorn binds 0.0.0.0:$PORT by default; loopback is enough here.
        GUNICORN_CMD_ARGS=f"--bind 127.0.0.1:{port}",
        WEB_CONCURRENCY="1",
        PYTHONUNBUFFERED="1",
    )
    (REPO / "var").mkdir(exist_ok=True)
    for stale in (REPO / "var").glob("celerybeat-schedule*"):
        stale.unlink()
    return env


class Fleet:
    """The compose services as local processes, each logging to its own file."""

    def __init__(self, env: dict[str, str], logs: Path) -> None:
        self.env = env
        self.logs = logs
        self.services = load_compose()["services"]
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.base_url = f"http://127.0.0.1:{env['PORT']}"

    def command(self, name: str) -> list[str]:
        return service_command(self.services[name], self.env)

    def run_once(self, name: str) -> None:
        result = subprocess.run(
            self.command(name), cwd=REPO, env=self.env, capture_output=True, timeout=180
        )
        assert result.returncode == 0, result.stderr.decode(errors="replace")

    def start(self, name: str) -> None:
        with (self.logs / f"{name}.log").open("wb") as out:
            self.processes[name] = subprocess.Popen(
                self.command(name), cwd=REPO, env=self.env, stdout=out, stderr=subprocess.STDOUT
            )

    def stop(self, *names: str) -> None:
        """SIGTERM (a warm shutdown) to all at once, then SIGKILL what is left after 20 s."""
        processes = [self.processes[name] for name in names]
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)

    def stop_all(self) -> None:
        self.stop(*self.processes)

    def healthcheck(self, name: str) -> subprocess.CompletedProcess[str]:
        """The service's compose healthcheck, run as Docker runs it in the container:
        CMD as the program and its arguments, CMD-SHELL through sh; $HOSTNAME the host's
        (a container's hostname is its workers' %h)."""
        test = self.services[name]["healthcheck"]["test"]
        kind, *args = (interpolate(str(part), self.env) for part in test)
        assert kind in ("CMD", "CMD-SHELL"), test
        argv = args if kind == "CMD" else ["sh", "-c", args[0]]
        env = {**self.env, "HOSTNAME": socket.gethostname()}
        return subprocess.run(
            argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=False
        )

    def get(self, path: str, **headers: str) -> tuple[int, bytes]:
        request = urllib.request.Request(self.base_url + path, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as error:
            return error.code, error.read()
        except OSError:
            return 0, b""

    def shell(self, code: str) -> str:
        result = subprocess.run(
            ["python", "manage.py", "shell", "-v", "0", "-c", code],
            cwd=REPO,
            env=self.env,
            capture_output=True,
            timeout=120,
        )
        assert result.returncode == 0, result.stderr.decode(errors="replace")
        return result.stdout.decode()

    def json_lines(self) -> list[dict[str, Any]]:
        records = []
        for log in sorted(self.logs.glob("*.log")):
            for line in log.read_text(errors="replace").splitlines():
                if line.startswith("{"):
                    records.append({**json.loads(line), "process": log.stem})
        return sorted(records, key=lambda record: record["time"])


@pytest.fixture
def fleet(process_env: dict[str, str], tmp_path: Path) -> Iterator[Fleet]:
    logs = tmp_path / "logs"
    logs.mkdir()
    fleet = Fleet(process_env, logs)
    fleet.run_once("migrate")
    try:
        for name in SERVICES:
            fleet.start(name)
        yield fleet
    finally:
        fleet.stop_all()


CREATE_ENDPOINT = """
from django.utils import timezone
from endpoints.models import Endpoint, Job, Tenant
job = Job.objects.create(tenant=Tenant.objects.create(name="Ops"), name="probe")
endpoint = Endpoint(job=job, name="health", url="{url}", baseline_interval_ms=3_600_000)
endpoint.full_clean()
endpoint.next_run_at = timezone.now()
endpoint.next_run_source = "baseline-interval"
endpoint.save()
print(endpoint.pk)
"""


def fetch_run(database_url: str, endpoint_id: int) -> dict[str, Any] | None:
    with psycopg.connect(database_url) as db:
        row = db.execute(
            "SELECT r.id, r.claim_token, r.status, s.claim_token, s.next_run_at > r.started_at"
            " FROM endpoints_run r JOIN endpoints_slot s ON s.endpoint_id = r.endpoint_id"
            " WHERE r.endpoint_id = %s AND r.status <> 'running'",
            [endpoint_id],
        ).fetchone()
    if row is None:
        return None
    run_id, claim_token, status, lease, rescheduled = row
    return {
        "id": run_id,
        "claim_token": str(claim_token),
        "status": status,
        "rescheduled": lease is None and rescheduled,
    }


def test_the_compose_process_lines_run_an_endpoint_and_report_health_metrics_and_logs(
    fleet: Fleet, process_database: str, httpserver: HTTPServer
) -> None:
    httpserver.expect_request("/probe").respond_with_json({"status": "healthy"})
    hostname = socket.gethostname()
    workers = [f"{queue}@{hostname}" for queue in WORKERS.values()]

    def workers_answer() -> bool:
        replies = app.control.ping(destination=workers, timeout=0.5)
        return {name for reply in replies for name in reply} >= set(workers)

    # Due at once: it runs as soon as beat and the workers are up.
    endpoint_id = int(fleet.shell(CREATE_ENDPOINT.format(url=httpserver.url_for("/probe"))))
    wait_for("the four workers never answered a ping", workers_answer, timeout=90, logs=fleet.logs)
    ready = wait_for(
        "/readyz never answered 200",
        lambda: fleet.get("/readyz")[0] == 200,
        timeout=60,
        logs=fleet.logs,
    )
    assert ready
    database_url = fleet.env["DATABASE_URL"].replace("postgres://", "postgresql://", 1)
    run = wait_for(
        "the endpoint never ran and was rescheduled",
        lambda: (r := fetch_run(database_url, endpoint_id)) and r["rescheduled"] and r,
        timeout=60,
        logs=fleet.logs,
    )
    assert run["status"] == "success"
    assert len(httpserver.log) == 1

    status, body = fleet.get("/readyz")
    assert status == 200, body
    # Every long-running service's healthcheck passes against the running processes.
    for name in SERVICES:
        wait_for(
            f"the {name} service's healthcheck never passed",
            lambda name=name: fleet.healthcheck(name).returncode == 0,
            timeout=60,
            logs=fleet.logs,
        )
    assert fleet.get("/metrics")[0] == 401
    run_counter = (
        'cronicorn_runs_total{source="baseline-interval",status="success",trigger="scheduled"} 1.0'
    )
    metrics = wait_for(
        "/metrics never showed the run",
        lambda: (
            (m := fleet.get("/metrics", Authorization=f"Bearer {TOKEN}")[1].decode())
            and run_counter in m
            and m
        ),
        timeout=10,
        logs=fleet.logs,
    )
    assert 'cronicorn_run_duration_seconds_count{status="success"} 1.0' in metrics
    assert "cronicorn_runs_in_flight 0.0" in metrics

    story = [
        record
        for record in fleet.json_lines()
        if record.get("claim_token") == run["claim_token"] or record.get("run_id") == run["id"]
    ]
    messages = [f"{r['process']}: {r['message']}" for r in story]
    assert story, f"no log line carries the run's ids\n{log_tails(fleet.logs)}"
    claim, *_, last = story
    assert claim["process"] == "worker-tick" and claim["run_id"] is None, messages
    assert claim["endpoint_id"] == endpoint_id and claim["source"] == "baseline-interval"
    assert any(r["run_id"] == run["id"] and r["process"] == "worker-execute" for r in story)
    assert "resched" in last["message"] or "next run" in last["message"], messages
    assert all(r["endpoint_id"] == endpoint_id for r in story), messages

    fleet.stop("beat")
    stopped = time.monotonic()
    wait_for(
        "/readyz stayed 200 after beat stopped",
        lambda: fleet.get("/readyz")[0] == 503,
        timeout=MAX_TICK_AGE + 10,
        logs=fleet.logs,
    )
    elapsed = time.monotonic() - stopped
    # The last tick ran at most a tick before the stop (or just after, from the queue);
    # polling and a loaded machine add a little.
    assert elapsed <= MAX_TICK_AGE + 3, elapsed
    checks = json.loads(fleet.get("/readyz")[1])["checks"]
    assert checks["tick"]["ok"] is False
    # Beat's healthcheck fails once its ticks stop; a stopped worker's ping goes unanswered.
    assert fleet.healthcheck("beat").returncode != 0
    fleet.stop("worker-notify")
    unanswered = fleet.healthcheck("worker-notify")
    assert unanswered.returncode != 0 and "No nodes replied" in unanswered.stderr + (
        unanswered.stdout
    )
    assert all(checks[name]["ok"] for name in ("database", "migrations", "broker"))
