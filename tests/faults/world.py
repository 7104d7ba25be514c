"""The world a fault hits: the fleet as real processes, run with the README's command lines,
against the suite's own Redis and PostgreSQL, calling a target on 127.0.0.1 that logs every
arrival.

- ``Services``: the Redis server and the PostgreSQL cluster (see ``services.py``), a
  migrated template database and, per shape, a template with the endpoints created by
  ``manage.py import_endpoints``; each case gets a fresh copy of one.
- ``Fleet``: celery beat, the tick worker (``-Q tick,maintenance``) and the execute worker
  (``-P threads``), each in its own process group with its own log file.
- ``FaultCase``: one database, one target, one fleet; ``run(fault)`` waits for the steady
  state, injects the fault, waits for recovery and returns the ``Outcome`` that
  ``analysis`` judges.
"""

from __future__ import annotations

import itertools
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from pathlib import Path
from types import TracebackType

from tests.faults.analysis import Execution, Outcome, RunRecord
from tests.faults.services import PostgresCluster, RedisServer, free_port
from tests.http_targets import TargetServer

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = "faults_template"
# Each case's endpoints have this timeout: the lease today is this plus the grace.
ENDPOINT_TIMEOUT = "5s"
# How long the fleet may take to start and call every endpoint twice.
STARTUP_TIMEOUT = 60.0

Fault = Callable[["FaultCase"], None]


@dataclass(frozen=True)
class Shape:
    """The size of a case: endpoints, how long the target holds each call, the processes."""

    endpoints: int = 5
    interval: str = "1s"
    hold_ms: int = 500  # so that runs are in flight when a fault hits
    beats: int = 1
    tick_workers: int = 1
    execute_workers: int = 1
    execute_threads: int = 64  # CRONICORN_EXECUTE_CONCURRENCY in docker-compose.yml
    env: Mapping[str, str] = field(default_factory=dict)  # extra settings for every process
    run_policy: Mapping[str, object] = field(default_factory=dict)  # the job's run policy
    # The target answers each endpoint 503 this many times, then 200, over and over: a
    # transient failure for the run policy's retries (0: always 200).
    failures_per_success: int = 0


class Services:
    """The suite's Redis and PostgreSQL, with the migrated template database."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.redis = RedisServer(workdir / "redis")
        self.postgres = PostgresCluster()
        self.secret_key = secrets.token_urlsafe(50)
        # Every case's target listens here, so the endpoints imported once per shape into
        # a template keep their URLs (an import costs a Django start per case otherwise).
        self.target_port = free_port()
        self._templates: dict[tuple[int, str, str], str] = {}
        self._cases = 0

    def __enter__(self) -> Services:
        self.redis.start()
        self.postgres.init()
        self.postgres.start()
        with self.postgres.connect() as conn:
            conn.execute(f'CREATE DATABASE "{TEMPLATE}"')
        env = self.child_env(TEMPLATE)
        subprocess.run(manage("migrate", "-v0"), cwd=ROOT, env=env, check=True)
        return self

    def __exit__(self, *exc: object) -> None:
        self.redis.stop()
        self.postgres.destroy()

    def fresh_database(self, shape: Shape) -> str:
        """A new database holding the shape's endpoints (not yet spread); an empty broker."""
        self._ensure_running()
        template = self._template_for(shape)
        self._cases += 1
        name = f"faults_case_{self._cases}"
        with self.postgres.connect() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
        self.redis.client().flushall()
        return name

    def target_url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.target_port}{path}"

    def _template_for(self, shape: Shape) -> str:
        """The migrated template plus the shape's endpoints, imported the way an operator
        does (``manage.py import_endpoints``), once per session."""
        key = (shape.endpoints, shape.interval, json.dumps(shape.run_policy, sort_keys=True))
        if key not in self._templates:
            name = f"{TEMPLATE}_{len(self._templates) + 1}"
            with self.postgres.connect() as conn:
                conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{TEMPLATE}"')
            path = self.workdir / f"{name}.json"
            path.write_text(json.dumps(self._endpoints_config(shape)))
            command = manage("import_endpoints", str(path), "-v0")
            env = self.child_env(name)
            subprocess.run(command, cwd=ROOT, env=env, check=True, capture_output=True)
            self._templates[key] = name
        return self._templates[key]

    def _endpoints_config(self, shape: Shape) -> dict[str, object]:
        endpoints = [
            {
                "name": name,
                "url": self.target_url(f"/{name}"),
                "baseline_interval": shape.interval,
                "timeout": ENDPOINT_TIMEOUT,
            }
            for name in endpoint_names(shape)
        ]
        tenant = {"name": "faults", "max_endpoints": len(endpoints), "min_interval": "1s"}
        job = {"name": "fleet", "endpoints": endpoints}
        if shape.run_policy:
            job["run_policy"] = dict(shape.run_policy)
        return {"version": 1, "tenants": [{**tenant, "jobs": [job]}]}

    def _ensure_running(self) -> None:
        """A case that failed during an outage must not take the next case down with it."""
        if not self.redis.answers():
            self.redis.start()
        if not self.postgres.running():
            self.postgres.start()

    def child_env(self, database: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """Production-like settings (DEBUG off, defaults for every Cronicorn setting)."""
        inherited = ("CRONICORN_", "CELERY_", "DJANGO_", "PROMETHEUS_", "DATABASE_URL", "DEBUG")
        env = {k: v for k, v in os.environ.items() if not k.startswith(inherited)}
        env.update(
            DJANGO_SETTINGS_MODULE="cronicorn_site.settings",
            DJANGO_SECRET_KEY=self.secret_key,
            DEBUG="false",
            DATABASE_URL=self.postgres.url(database),
            CELERY_BROKER_URL=self.redis.url,
            CRONICORN_ALLOW_PRIVATE_ADDRESSES="true",
            CRONICORN_LOG_LEVEL="INFO",
            PYTHONUNBUFFERED="1",
        )
        env.update(extra or {})
        return env


def manage(*args: str) -> list[str]:
    return [sys.executable, "manage.py", *args]


def celery(*args: str) -> list[str]:
    return [sys.executable, "-m", "celery", "-A", "cronicorn_site", *args]


class Fleet:
    """The README's processes; ``restart`` is what a restart policy does after a crash."""

    def __init__(self, shape: Shape, env: dict[str, str], logs: Path) -> None:
        self.env = env
        self.logs = logs
        self.commands: dict[str, list[str]] = {}
        for k in range(shape.beats):
            self.commands[f"beat{k}"] = celery("beat", "--schedule", str(logs / f"beat{k}"))
        for k in range(shape.tick_workers):
            self.commands[f"tick{k}"] = celery(
                *("worker", "-Q", "tick,maintenance", "-c", "2", "-n", f"tick{k}@%h"),
                *("--without-mingle", "--without-gossip"),
            )
        for k in range(shape.execute_workers):
            threads = str(shape.execute_threads)
            self.commands[f"execute{k}"] = celery(
                *("worker", "-Q", "execute", "-P", "threads", "-c", threads),
                *("-n", f"execute{k}@%h", "--without-mingle", "--without-gossip"),
            )
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self._offsets: dict[str, int] = {}  # where each log was when its process started

    def start(self) -> None:
        for name in self.commands:
            self.restart(name)

    def restart(self, name: str) -> None:
        self.kill(name, signal.SIGKILL)
        log = self.log(name)
        self._offsets[name] = log.stat().st_size if log.exists() else 0
        with log.open("ab") as out:
            self.processes[name] = subprocess.Popen(
                self.commands[name],
                cwd=ROOT,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: signals reach the pool too
            )

    def kill(self, name: str, sig: signal.Signals) -> None:
        """Send ``sig`` to the process and its children (prefork pool), as a host would."""
        process = self.processes.get(name)
        if process is not None and process.poll() is None:
            os.killpg(process.pid, sig)
            if sig == signal.SIGKILL:
                process.wait(timeout=10)

    def stop(self) -> None:
        """SIGKILL everything: the outcome is already taken, a warm shutdown only costs time."""
        for name in self.processes:
            self.kill(name, signal.SIGKILL)

    def log(self, name: str) -> Path:
        return self.logs / f"{name}.log"

    def logged(self, names: list[str], line: bytes) -> bool:
        """Whether each process's log holds ``line`` since the process last started."""
        return all(line in self.log(name).read_bytes()[self._offsets[name] :] for name in names)


class FaultCase:
    """One case: a fresh database, the target, the endpoints and the fleet."""

    def __init__(self, services: Services, shape: Shape, workdir: Path) -> None:
        self.services = services
        self.shape = shape
        self.workdir = workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.database = services.fresh_database(shape)
        self.env = services.child_env(self.database, shape.env)
        self.target = TargetServer(port=services.target_port)
        self.endpoints = endpoint_names(shape)
        self.fleet = Fleet(shape, self.env, workdir)

    def __enter__(self) -> FaultCase:
        for name in self.endpoints:
            statuses = [503] * self.shape.failures_per_success + [200]
            answer_in_turn(self.target, f"/{name}", statuses, delay=self.shape.hold_ms / 1000)
        # Nothing is due while the fleet boots: endpoints claimed late all at once would keep
        # one phase (start to start), and the bursts after a fault would be the harness's.
        self._execute(PARK_SQL)
        self.fleet.start()
        try:
            self._wait_until_the_fleet_is_up()
        except BaseException:
            self.__exit__(None, None, None)  # a with-block whose __enter__ fails never exits
            raise
        self._execute(SPREAD_SQL, {"n": len(self.endpoints)})
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.fleet.stop()
        self.target.close()

    def run(self, name: str, fault: Fault, *, patience: float) -> Outcome:
        """Steady state, the fault, then up to ``patience`` s for every endpoint to recover."""
        self.wait_for_calls(since=0.0, count=2, timeout=STARTUP_TIMEOUT, required=True)
        # The fault must hit runs in flight, or a redelivery case could pass vacuously.
        if not self.target.wait_for(lambda: self._calls_open() > 0, timeout=STARTUP_TIMEOUT):
            raise AssertionError(f"no call in flight to inject the fault into; {self.workdir}")
        in_flight = self._calls_open()
        started = time.time()
        fault(self)
        ended = time.time()
        if self.wait_for_calls(since=ended, count=1, timeout=patience):
            # A few more calls each, so a double execution after the recovery shows too.
            self.wait_for_calls(since=ended, count=2, timeout=patience)
        return self.outcome(name, started=started, ended=ended, in_flight=in_flight)

    def wait_for_calls(
        self, *, since: float, count: int, timeout: float, required: bool = False
    ) -> bool:
        """Poll until every endpoint was called ``count`` times since ``since``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self._short_of(since, count):
                return True
            time.sleep(0.05)
        if required:
            short = self._short_of(since, count)
            raise AssertionError(
                f"{len(short)} endpoint(s) were not called {count} times within {timeout} s "
                f"(e.g. {short[:5]}); logs in {self.workdir}"
            )
        return False

    def executions(self) -> list[Execution]:
        return [
            Execution(endpoint=hit.path.lstrip("/"), arrived=hit.at, finished=hit.finished)
            for hit in self.target.hits()
        ]

    def outcome(self, name: str, *, started: float, ended: float, in_flight: int) -> Outcome:
        taken_at = time.time()
        runs = [_run_record(row) for row in self._execute(RUNS_SQL)]
        orphans = [str(row[0]) for row in self._execute(WITHOUT_A_FUTURE_RUN_SQL)]
        return Outcome(
            fault=name,
            endpoints=self.endpoints,
            fault_started=started,
            fault_ended=ended,
            executions=self.executions(),
            runs=runs,
            endpoints_without_a_future_run=orphans,
            logs={name: str(self.fleet.log(name)) for name in self.fleet.commands},
            in_flight_at_fault=in_flight,
            taken_at=taken_at,
            allow=allowed_at_once(self.shape),
        )

    def _wait_until_the_fleet_is_up(self) -> None:
        """Every worker logged that it is ready and a tick has been recorded (beat and tick
        work). The log, not a ping: Celery would send a ping from this process to the
        broker of its CELERY_BROKER_URL variable, whatever broker the app is given."""
        workers = [name for name in self.fleet.commands if not name.startswith("beat")]
        ready = partial(self.fleet.logged, workers, READY_LINE)
        if not self.target.wait_for(ready, timeout=STARTUP_TIMEOUT):
            raise AssertionError(f"the workers were not ready within {STARTUP_TIMEOUT} s")
        ticked = partial(self._execute, TICKED_SQL)
        if not self.target.wait_for(lambda: bool(ticked()), timeout=STARTUP_TIMEOUT):
            raise AssertionError(f"no tick was recorded within {STARTUP_TIMEOUT} s")

    def _execute(
        self, sql: str, params: dict[str, object] | None = None
    ) -> list[tuple[object, ...]]:
        with self.services.postgres.connect(self.database) as conn:
            cursor = conn.execute(sql, params)
            return cursor.fetchall() if cursor.description else []

    def _calls_open(self) -> int:
        return sum(1 for hit in self.target.hits() if hit.finished is None)

    def _short_of(self, since: float, count: int) -> list[str]:
        calls: dict[str, int] = dict.fromkeys(self.endpoints, 0)
        for execution in self.executions():
            if execution.arrived >= since and execution.endpoint in calls:
                calls[execution.endpoint] += 1
        return [name for name, n in calls.items() if n < count]


def answer_in_turn(target: TargetServer, path: str, statuses: list[int], delay: float) -> None:
    """Answer ``path`` with each status in turn, over and over; each call moves the turn
    on as it arrives, so the call after it gets the next status."""
    turn = itertools.cycle(statuses)

    def next_reply() -> None:
        target.reply(path, status=next(turn), delay=delay, action=next_reply)

    next_reply()


def allowed_at_once(shape: Shape) -> int:
    """Calls of one endpoint the shape's run policy lets run at once."""
    overlap = shape.run_policy.get("overlap")
    return int(str(overlap["allow"])) if isinstance(overlap, dict) else 1


def endpoint_names(shape: Shape) -> list[str]:
    return [f"e{k:04d}" for k in range(shape.endpoints)]


PARK_SQL = "UPDATE endpoints_slot SET next_run_at = now() + interval '1 day'"
TICKED_SQL = "SELECT 1 FROM endpoints_heartbeat WHERE name = 'tick'"
READY_LINE = b" ready."  # celery.apps.worker: "<name>@<host> ready."
# Phases spread evenly over the first second, so a burst means the engine bunched them.
SPREAD_SQL = """
UPDATE endpoints_slot s SET next_run_at = now() + interval '1 second' * (1 + o.k::float / %(n)s)
FROM (SELECT id, row_number() OVER (ORDER BY name) - 1 AS k FROM endpoints_endpoint) o
WHERE s.endpoint_id = o.id
"""
RUNS_SQL = """
SELECT r.id, e.name, r.scheduled_for, r.started_at, r.finished_at, r.trigger, r.status,
       r.claim_token::text, r.retry_of_id, r.error, r.attempt
FROM endpoints_run r JOIN endpoints_endpoint e ON e.id = r.endpoint_id
"""
# A live endpoint with neither a next run nor a claim will never run again.
WITHOUT_A_FUTURE_RUN_SQL = """
SELECT e.name FROM endpoints_endpoint e JOIN endpoints_slot s ON s.endpoint_id = e.id
WHERE e.archived_at IS NULL AND s.next_run_at IS NULL AND s.claim_token IS NULL
ORDER BY e.name
"""


def _run_record(row: tuple[object, ...]) -> RunRecord:
    id_, name, scheduled, started, finished, trigger, status, token, retry_of, error, attempt = row
    return RunRecord(
        id=int(str(id_)),
        endpoint=str(name),
        scheduled_for=_seconds(scheduled),
        started_at=_seconds(started),
        finished_at=None if finished is None else _seconds(finished),
        trigger=str(trigger),
        status=str(status),
        claim_token=None if token is None else str(token),
        retry_of=None if retry_of is None else int(str(retry_of)),
        error=str(error),
        attempt=int(str(attempt)),
    )


def _seconds(value: object) -> float:
    assert isinstance(value, datetime)
    return value.timestamp()
