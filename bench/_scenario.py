"""One end-to-end scenario, run in its own process (its own database and Django setup):

1. a fresh database, the fast local server, ``n`` endpoints not yet due;
2. the raw HTTP ceiling: ``perform_request`` on ``threads`` threads against that server;
3. the scheduler (Celery beat + tick worker + execute worker(s), or runscheduler);
4. the endpoints made due, spread evenly over one interval; after ``warmup`` seconds a
   window of ``window`` seconds is measured: runs finished, start lateness, CPU per run.

    .venv/bin/python bench/_scenario.py '{"mode": "celery", "database": "postgres", ...}'

Prints the result as JSON on its last line. ``throughput.py`` and ``lateness.py`` call it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from _common import (
    RESULTS,
    ROOT,
    bench_env,
    fresh_database,
    load,
    percentile,
    pg_url,
    setup_django,
    sqlite_url,
    wait_until,
)
from _cpu import CLK_TCK, cpu_seconds, machine_busy
from _gc import pauses

LOGS = RESULTS / "logs"
FAR_FUTURE = timedelta(days=1)


@dataclass
class Params:
    mode: str  # "celery" or "runscheduler"
    database: str  # "postgres" or "sqlite"
    n: int = 200
    interval_ms: int = 1000
    warmup: float = 5.0
    window: float = 20.0
    threads: int = 16  # threads of the raw HTTP ceiling's perform_request loop
    in_flight: int = 200  # runs in flight per process (CRONICORN_MAX_IN_FLIGHT)
    celery_concurrency: int = 4  # Celery pool threads of each execute worker
    workers: int = 1  # execute worker processes (Celery)
    chunk_size: int | None = None  # override endpoints.tasks.CHUNK_SIZE (Celery)
    batch: int = 5000  # CRONICORN_BATCH_SIZE
    ceiling_seconds: float = 5.0
    label: str = ""
    extra_env: dict[str, str] = field(default_factory=dict)
    # Alerts (bench/alert_lateness.py): endpoints that fail (each in its own job, so each
    # alert is a delivery of its own) and webhook channels that never answer.
    failing: int = 0
    dead_channels: int = 0
    after_failures: int = 1  # the failing endpoints' rule
    live_channel: bool = False  # a webhook channel to a receiver timing each alert
    database_suffix: str = ""
    profile: bool = False  # py-spy and pg_stat_statements over the window (bench/_profile.py)
    # An outage after the window (Celery): the beat stopped (SIGSTOP) for ``outage``
    # seconds, so nothing is claimed, then resumed and watched for ``after_outage`` s.
    outage: float = 0.0
    after_outage: float = 60.0
    # The load job's run policy (bench/throughput.py --policy largest): every endpoint's.
    run_policy: dict[str, Any] = field(default_factory=dict)

    def database_url(self) -> str:
        if self.database == "sqlite":
            return sqlite_url(f"bench_{self.mode}{self.database_suffix}")
        return pg_url(f"cc_bench_{self.mode}{self.database_suffix}")


class Processes:
    """Child processes, each with its own log; all stopped (TERM, then KILL) on exit."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.children: dict[str, subprocess.Popen[bytes]] = {}
        LOGS.mkdir(parents=True, exist_ok=True)

    def start(self, name: str, args: Sequence[str]) -> subprocess.Popen[bytes]:
        with (LOGS / f"{name}.log").open("wb") as log:
            child = subprocess.Popen(
                list(args),
                cwd=ROOT,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.children[name] = child
        return child

    def log(self, name: str) -> str:
        return (LOGS / f"{name}.log").read_text(errors="replace")

    def __enter__(self) -> Processes:
        return self

    def __exit__(self, *exc: object) -> None:
        for child in self.children.values():
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        for child in self.children.values():
            try:
                child.wait(timeout=20)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait(timeout=10)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def redis_pid() -> int | None:
    try:
        out = subprocess.run(
            ["redis-cli", "info", "server"], capture_output=True, text=True, timeout=5
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in out.splitlines():
        if line.startswith("process_id:"):
            return int(line.split(":")[1])
    return None


def postgres_backends() -> list[int]:
    """Server processes serving this database (PostgreSQL only)."""
    from django.db import connection

    if connection.vendor != "postgresql":
        return []
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid()"
        )
        return [row[0] for row in cursor.fetchall()]


def postgres_server_cpu() -> float | None:
    """CPU seconds of the whole PostgreSQL server so far: the postmaster, its live
    children (backends, WAL writer, checkpointer, autovacuum) and the children it has
    reaped (their CPU is in its ``cutime``/``cstime``), so a backend that closes during
    the window is still counted. None when the server is not on this machine."""
    from django.db import connection

    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute("SELECT setting FROM pg_settings WHERE name = 'data_directory'")
        data = Path(cursor.fetchone()[0])
    try:
        postmaster = int((data / "postmaster.pid").read_text().split()[0])
        fields = Path(f"/proc/{postmaster}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, ValueError, IndexError):
        return None
    total = sum(int(v) for v in fields[11:15]) / CLK_TCK  # utime stime cutime cstime
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            child = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(child[1]) == postmaster:
            total += (int(child[11]) + int(child[12])) / CLK_TCK
    return total


class CpuMeter:
    """CPU used by each component between ``start()`` and ``stop()``."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids

    def _sample(self) -> dict[str, float]:
        sample = {name: cpu_seconds(pid) for name, pid in self.pids.items()}
        backends = postgres_backends()
        self.backends = set(getattr(self, "backends", set())) | set(backends)
        if (server := postgres_server_cpu()) is not None:
            sample["postgres (whole server)"] = server
        else:  # a backend that closes within the window takes its CPU with it
            sample["postgres (this db)"] = sum(cpu_seconds(pid) for pid in self.backends)
        busy, total = machine_busy()
        sample["machine busy"], sample["machine total"] = busy, total
        return sample

    def start(self) -> None:
        self.backends: set[int] = set(postgres_backends())
        self.before = self._sample()

    def stop(self) -> dict[str, float]:
        after = self._sample()
        return {name: after[name] - self.before.get(name, 0.0) for name in after}


def make_endpoints(params: Params, url: str) -> None:
    from django.utils import timezone

    from endpoints.models import Endpoint, Job, Tenant

    tenant = Tenant.objects.create(name="bench", max_endpoints=params.n + 10)
    job = Job.objects.create(tenant=tenant, name="load", run_policy=params.run_policy)
    later = timezone.now() + FAR_FUTURE
    Endpoint.objects.bulk_create(
        [
            Endpoint(
                job=job,
                name=f"e{i}",
                url=f"{url}?e={i}",  # the target notes each endpoint's arrivals
                baseline_interval_ms=params.interval_ms,
                timeout_ms=5000,
                next_run_at=later,
                next_run_source="baseline-interval",
            )
            for i in range(params.n)
        ],
        batch_size=1000,
    )


def make_alerting(
    params: Params, refused_url: str, dead_url: str, live_url: str | None = None
) -> None:
    """``failing`` endpoints calling a refused port, each in its own job, and
    ``dead_channels`` webhook channels of the same tenant on a port that never answers
    (and one live channel to ``live_url`` when given)."""
    from django.utils import timezone

    from endpoints.models import Endpoint, Job, Tenant
    from notifications.models import AlertRule, Channel, ChannelKind

    tenant = Tenant.objects.get(name="bench")
    later = timezone.now() + FAR_FUTURE
    for i in range(params.failing):
        job = Job.objects.create(tenant=tenant, name=f"failing-{i}")
        AlertRule.objects.create(job=job, after_failures=params.after_failures)
        Endpoint.objects.create(
            job=job, name="down", url=refused_url, baseline_interval_ms=params.interval_ms,
            min_interval_ms=params.interval_ms, max_interval_ms=params.interval_ms,
            timeout_ms=5000, next_run_at=later, next_run_source="baseline-interval",
        )  # fmt: skip
    for i in range(params.dead_channels):
        Channel.objects.create(
            tenant=tenant, name=f"dead-{i}", kind=ChannelKind.WEBHOOK, target=dead_url
        )
    if live_url:
        Channel.objects.create(
            tenant=tenant, name="live", kind=ChannelKind.WEBHOOK, target=live_url
        )


class AlertReceiver:
    """A webhook receiver on 127.0.0.1 keeping each POST's arrival time and JSON body."""

    def __init__(self) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        received: list[tuple[float, dict[str, Any]]] = []
        self.received = received

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                received.append((time.time(), json.loads(body or b"{}")))
                self.send_response(200)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/alerts"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def alert_delays(received: list[tuple[float, dict[str, Any]]], after: int) -> dict[str, Any]:
    """For each failing alert received, its delay after the run that made the streak reach
    the rule's ``after`` failures (that run's end)."""
    from endpoints.models import Endpoint, Run

    first: dict[int, float] = {}
    for arrived, payload in received:
        for alert in payload.get("alerts", []):
            if alert.get("event") == "failing":
                first.setdefault(alert["endpoint_id"], arrived)
    delays = []
    for endpoint_id, arrived in first.items():
        failures = Run.objects.filter(endpoint_id=endpoint_id).exclude(status="success")
        nth = failures.order_by("started_at").values_list("finished_at", flat=True)[
            after - 1 : after
        ]
        if nth and nth[0] is not None:
            delays.append((arrived - nth[0].timestamp()) * 1000)
    failing = Endpoint.objects.filter(job__name__startswith="failing-").count()
    return {
        "alerted": len(first),
        "failing_endpoints": failing,
        "alert_delay_ms": {
            "p50": round(percentile(delays, 0.50), 1) if delays else None,
            "p95": round(percentile(delays, 0.95), 1) if delays else None,
            "max": round(max(delays), 1) if delays else None,
        },
    }


def black_hole() -> socket.socket:
    """A port that completes TCP handshakes (the kernel does, up to the backlog) but never
    reads or answers: every request to it waits for its deadline."""
    hole = socket.socket()
    hole.bind(("127.0.0.1", 0))
    hole.listen(4096)
    return hole


def alert_figures(start: datetime, end: datetime) -> dict[str, Any]:
    from notifications.models import Alert, DeliveryAttempt

    attempts = DeliveryAttempt.objects.filter(at__gte=start, at__lt=end)
    return {
        "alerts": Alert.objects.count(),
        "delivery_attempts_in_window": attempts.count(),
        "failed_attempts_in_window": attempts.filter(ok=False).count(),
    }


def make_due(params: Params) -> datetime:
    """Spread the first runs evenly over one interval from a second from now (returned):
    a steady rate. The spread is written far ahead, then moved to its start by one
    statement, so that the first slots are not already late by the time a bulk update of
    20 000 rows takes."""
    from django.db.models import F
    from django.utils import timezone

    from endpoints.models import Slot

    base = timezone.now() + FAR_FUTURE
    slots = list(Slot.objects.order_by("pk").only("pk"))
    step = params.interval_ms / len(slots)
    for i, slot in enumerate(slots):
        slot.next_run_at = base + timedelta(milliseconds=i * step)
    Slot.objects.bulk_update(slots, ["next_run_at"], batch_size=1000)
    start = timezone.now() + timedelta(seconds=1)
    Slot.objects.update(next_run_at=F("next_run_at") - (base - start))
    return start


def raw_http_ceiling(url: str, threads: int, seconds: float) -> dict[str, float]:
    """Requests per second of ``perform_request`` alone, on ``threads`` threads."""
    from endpoints.engine.executor import HttpRequest, perform_request

    request = HttpRequest(url=url, timeout_ms=5000)
    counts = [0] * threads
    failures = [0] * threads
    deadline = time.monotonic() + seconds

    def hammer(slot: int) -> None:
        while time.monotonic() < deadline:
            result = perform_request(request)
            counts[slot] += 1
            failures[slot] += result.status != "success"

    cpu_before = time.process_time()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(hammer, range(threads)))
    cpu = time.process_time() - cpu_before
    total = sum(counts)
    return {
        "requests_per_s": round(total / seconds, 1),
        "failures": sum(failures),
        "client_cpu_ms_per_request": round(1000 * cpu / max(total, 1), 3),
    }


def celery_args(role: str, queues: str, pool: str, concurrency: int) -> list[str]:
    name = f"bench-{role}-{uuid.uuid4().hex[:6]}@localhost"
    return [
        sys.executable,
        "bench/_celery_main.py",
        "worker",
        "-Q",
        queues,
        "-P",
        pool,
        "-c",
        str(concurrency),
        "-n",
        name,
        "-l",
        "warning",
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
    ]


def start_celery(params: Params, procs: Processes) -> dict[str, int]:
    import redis

    from cronicorn_site.celery import app

    redis.Redis.from_url(procs.env["CELERY_BROKER_URL"]).flushdb()
    pids = {}
    names = []
    for k in range(params.workers):
        args = celery_args(f"execute{k}", "execute", "threads", params.celery_concurrency)
        pids[f"execute worker {k}"] = procs.start(f"execute{k}", args).pid
        names.append(args[args.index("-n") + 1])
    if params.failing or params.dead_channels:
        notify_args = celery_args("notify", "notify", "threads", 2)
        pids["notify worker"] = procs.start("notify", notify_args).pid
        names.append(notify_args[notify_args.index("-n") + 1])
    tick_args = celery_args("tick", "tick", "solo", 1)
    pids["tick worker"] = procs.start("tick", tick_args).pid
    names.append(tick_args[tick_args.index("-n") + 1])
    if not wait_until(lambda: _answered(app, names), timeout=60, every=0.5):
        raise RuntimeError(f"Celery workers did not start; see {LOGS}")
    schedule = RESULTS / "celerybeat-schedule"
    schedule.unlink(missing_ok=True)
    beat = [sys.executable, "bench/_celery_main.py", "beat", "-s", str(schedule), "-l", "warning"]
    pids["beat"] = procs.start("beat", beat).pid
    # The clock starts once the fleet ticks: a beat still importing (10-20 s on a busy
    # machine) would otherwise eat the warm-up and the window.
    from endpoints.models import Heartbeat

    if not wait_until(lambda: Heartbeat.objects.filter(name="tick").exists(), timeout=60):
        raise RuntimeError(f"the Celery fleet did not tick; see {LOGS}")
    return pids


def _answered(app: Any, names: list[str]) -> bool:
    replies = app.control.ping(destination=names, timeout=0.5)
    return {name for reply in replies for name in reply} >= set(names)


def start_runscheduler(params: Params, procs: Processes) -> dict[str, int]:
    from endpoints.models import Heartbeat

    duration = params.warmup + params.window + 10
    args = [
        sys.executable,
        "manage.py",
        "runscheduler",
        "--duration",
        str(duration),
        "--max-in-flight",
        str(params.in_flight),
    ]
    pid = procs.start("runscheduler", args).pid
    if not wait_until(lambda: Heartbeat.objects.filter(name="tick").exists(), timeout=60):
        raise RuntimeError(f"runscheduler did not tick; see {LOGS / 'runscheduler.log'}")
    return {"runscheduler": pid}


def window_figures(start: datetime, end: datetime) -> dict[str, Any]:
    from django.db.models import Count

    from endpoints.models import Run

    finished = Run.objects.filter(finished_at__gte=start, finished_at__lt=end)
    statuses = dict(finished.values_list("status").annotate(n=Count("pk")).order_by())
    slots = Run.objects.filter(scheduled_for__gte=start, scheduled_for__lt=end)
    late_ms = [
        (started - scheduled).total_seconds() * 1000
        for started, scheduled in slots.values_list("started_at", "scheduled_for")
    ]
    seconds = (end - start).total_seconds()
    return {
        "runs_finished": sum(statuses.values()),
        "statuses": statuses,
        "runs_per_s": round(sum(statuses.values()) / seconds, 1),
        "slots_started": len(late_ms),
        "lateness_ms": {
            "p50": round(percentile(late_ms, 0.50), 1),
            "p95": round(percentile(late_ms, 0.95), 1),
            "p99": round(percentile(late_ms, 0.99), 1),
            "max": round(max(late_ms), 1) if late_ms else None,
            "early": sum(1 for value in late_ms if value < 0),
        },
    }


def target_figures(target: str, arrivals: Path, start: datetime, end: datetime) -> dict[str, Any]:
    """Lateness where the call lands: each request's arrival at the target minus its
    run's slot, for the slots scheduled in the window. A run's ``started_at`` is when the
    engine sent the request (and before issue 23, when its Run was recorded, before the
    request): this one counts everything between the slot and the target.

    Also whether every slot was called once. The arrivals are taken at a time T; the
    runs finished by T each arrived before they finished, and an endpoint's runs do not
    overlap, so its arrivals up to its last finished run's end are exactly those runs'.
    An endpoint whose counts differ there had a call without a run or a run without a
    call (``endpoints_mismatched``: 0 when every slot was called once); the i-th arrival
    is the i-th run's. ``slots_run_twice`` counts (endpoint, slot) pairs with two Runs."""
    import urllib.request

    from django.db.models import Count

    from endpoints.models import Endpoint, Run

    taken = datetime.now(UTC)
    urllib.request.urlopen(target.replace("/ping", "/__arrivals"), timeout=10).read()
    by_name: dict[str, list[float]] = {}
    for path, at in json.loads(arrivals.read_text()):
        if "?e=" in path:
            by_name.setdefault("e" + path.rsplit("?e=", 1)[1], []).append(at)
    names = dict(Endpoint.objects.values_list("pk", "name"))
    runs: dict[int, list[tuple[datetime, datetime]]] = {}
    finished = Run.objects.filter(finished_at__lte=taken).order_by("scheduled_for")
    for endpoint_id, scheduled, ended in finished.values_list(
        "endpoint_id", "scheduled_for", "finished_at"
    ):
        runs.setdefault(endpoint_id, []).append((scheduled, ended))
    late_ms, mismatched = [], 0
    for endpoint_id, done in runs.items():
        last_end = max(ended for _slot, ended in done).timestamp()
        landed = sorted(at for at in by_name.get(names[endpoint_id], []) if at <= last_end)
        if len(landed) != len(done):
            mismatched += 1
            continue
        late_ms += [
            (at - slot.timestamp()) * 1000
            for (slot, _ended), at in zip(done, landed, strict=True)
            if start <= slot < end
        ]
    twice = (
        Run.objects.values("endpoint_id", "scheduled_for")
        .annotate(runs=Count("pk"))
        .filter(runs__gt=1)
        .count()
    )
    return {
        "slots": len(late_ms),
        "endpoints_mismatched": mismatched,
        "slots_run_twice": twice,
        "p50": round(percentile(late_ms, 0.50), 1),
        "p95": round(percentile(late_ms, 0.95), 1),
        "p99": round(percentile(late_ms, 0.99), 1),
        "max": round(max(late_ms), 1) if late_ms else None,
    }


def per_second_figures(
    start: datetime, end: datetime, *, on_time_ms: float, expected_per_s: float
) -> dict[str, Any]:
    """Lateness by the second the slots were due, from the fleet's start (cold start
    included) to the window's end, and how long until it was on time: the first second
    from which every second's p99 stays under ``on_time_ms`` and nine in ten of its
    expected slots (``expected_per_s``) have started (a slot not started yet is late)."""
    from endpoints.models import Run

    by_second: dict[int, list[float]] = {}
    slots = Run.objects.filter(scheduled_for__gte=start, scheduled_for__lt=end)
    for started, scheduled in slots.values_list("started_at", "scheduled_for").iterator():
        second = int((scheduled - start).total_seconds())
        by_second.setdefault(second, []).append((started - scheduled).total_seconds() * 1000)
    seconds = []
    for second in range(int((end - start).total_seconds())):
        late = by_second.get(second, [])
        seconds.append(
            {
                "second": second,
                "due": len(late),
                "mean_ms": round(sum(late) / len(late), 1) if late else None,
                "p99_ms": round(percentile(late, 0.99), 1) if late else None,
                "max_ms": round(max(late), 1) if late else None,
            }
        )
    on_time_after = None
    for index in range(len(seconds)):
        if all(
            (s["p99_ms"] or 0.0) < on_time_ms and s["due"] >= 0.9 * expected_per_s - 1
            for s in seconds[index:]
        ):
            on_time_after = index
            break
    return {"seconds": seconds, "on_time_after_s": on_time_after}


def fleet_state(now: datetime) -> dict[str, Any]:
    """What scheduler_status and the dashboard say of the fleet at the window's end."""
    from endpoints.health import fleet_behind

    return dict(fleet_behind(now=now))


def run(params: Params) -> dict[str, Any]:

    url = params.database_url()
    gc_log = LOGS / "gc"
    shutil.rmtree(gc_log, ignore_errors=True)
    env = bench_env(
        url,
        BENCH_GC_LOG=str(gc_log),
        CRONICORN_MAX_IN_FLIGHT=str(params.in_flight),
        CRONICORN_BATCH_SIZE=str(params.batch),
        **({"BENCH_CHUNK_SIZE": str(params.chunk_size)} if params.chunk_size else {}),
        **params.extra_env,
    )
    fresh_database(url)
    setup_django(url, **env)
    result: dict[str, Any] = {"params": asdict(params), "load_before": load()}
    with Processes(env) as procs:
        port = free_port()
        arrivals = LOGS / "arrivals.json"
        arrivals.unlink(missing_ok=True)
        server = procs.start(
            "server", [sys.executable, "bench/fast_server.py", str(port), str(arrivals)]
        )
        if not wait_until(lambda: "ready" in procs.log("server"), timeout=20):
            raise RuntimeError("the fast server did not start")
        target = f"http://127.0.0.1:{port}/ping"
        result["raw_http"] = raw_http_ceiling(target, params.threads, params.ceiling_seconds)
        make_endpoints(params, target)
        hole = black_hole()
        receiver = AlertReceiver() if params.live_channel else None
        make_alerting(
            params,
            f"http://127.0.0.1:{free_port()}/refused",
            f"http://127.0.0.1:{hole.getsockname()[1]}/hook",
            receiver.url if receiver else None,
        )
        starter = start_celery if params.mode == "celery" else start_runscheduler
        pids = {"server": server.pid, **starter(params, procs)}
        if (redis := redis_pid()) and params.mode == "celery":
            pids["redis (shared)"] = redis
        start = make_due(params)
        window_start = start + timedelta(seconds=params.warmup)
        window_end = window_start + timedelta(seconds=params.window)
        _sleep_until(window_start)
        meter = CpuMeter(pids)
        meter.start()
        profiler = None
        if params.profile:
            from _profile import Profiler

            out = LOGS / f"profile-{params.label or params.mode}"
            profiler = Profiler(pids, params.window, url, out)
            profiler.start()
        _sleep_until(window_end)
        cpu = meter.stop()
        if profiler:
            result["profile"] = profiler.stop()
        result["gc"] = pauses(gc_log, pids, window_start.timestamp(), window_end.timestamp())
        result["fleet"] = fleet_state(window_end)
        result["load_during"] = load()
        _sleep_until(window_end + timedelta(seconds=2))  # let runs of the window finish
        result.update(window_figures(window_start, window_end))
        result["at_target"] = target_figures(target, arrivals, window_start, window_end)
        rate = params.n * 1000 / params.interval_ms
        result["per_second"] = per_second_figures(
            start, window_end, on_time_ms=100.0, expected_per_s=rate
        )
        if params.outage and params.mode == "celery":
            result["outage"] = outage(procs.children["beat"], params, rate)
        result.update(alert_figures(window_start, window_end))
        if receiver:
            result.update(alert_delays(receiver.received, params.after_failures))
            receiver.close()
        hole.close()
        result["cpu"] = _cpu_report(cpu, result["runs_finished"], params.window)
        result["alive"] = {name: child.poll() is None for name, child in procs.children.items()}
    return result


def outage(beat: subprocess.Popen[bytes], params: Params, rate: float) -> dict[str, Any]:
    """Stop the beat for ``params.outage`` seconds (no tick: nothing claimed, every slot
    due meanwhile waits), resume it, and report lateness per second due from the outage's
    start and how long after the resume the fleet was on time again."""
    from django.utils import timezone

    stopped = timezone.now()
    os.killpg(beat.pid, signal.SIGSTOP)
    try:
        time.sleep(params.outage)
    finally:
        os.killpg(beat.pid, signal.SIGCONT)
    resumed = timezone.now()
    end = resumed + timedelta(seconds=params.after_outage)
    _sleep_until(end + timedelta(seconds=2))
    figures = per_second_figures(resumed, end, on_time_ms=100.0, expected_per_s=rate)
    # Slots due during the outage, by when they started after it.
    during = per_second_figures(stopped, resumed, on_time_ms=100.0, expected_per_s=rate)
    return {
        "seconds": params.outage,
        "slots_due_during": sum(s["due"] for s in during["seconds"]),
        "after": figures["seconds"],
        "on_time_after_resume_s": figures["on_time_after_s"],
        **window_figures(resumed + timedelta(seconds=params.after_outage / 2), end),
    }


def _cpu_report(cpu: dict[str, float], runs: int, window: float) -> dict[str, Any]:
    machine_cores = cpu.pop("machine busy") / max(cpu.pop("machine total"), 1e-9) * os.cpu_count()
    per_run = {name: round(1000 * seconds / max(runs, 1), 3) for name, seconds in cpu.items()}
    return {
        "cores_used_by_component": {name: round(s / window, 2) for name, s in cpu.items()},
        "cpu_ms_per_run": per_run,
        "cpu_ms_per_run_total": round(sum(per_run.values()), 3),
        "machine_cores_busy": round(machine_cores, 2),
    }


def _sleep_until(moment: datetime) -> None:
    from django.utils import timezone

    delay = (moment - timezone.now()).total_seconds()
    if delay > 0:
        time.sleep(delay)


def run_in_subprocess(params: Params, *, timeout: float | None = None) -> dict[str, Any]:
    """Run one scenario in a child process and return its JSON result."""
    budget = timeout or (
        params.warmup
        + params.window
        + params.ceiling_seconds
        + 180
        + (params.outage + params.after_outage if params.outage else 0)
    )
    done = subprocess.run(
        [sys.executable, str(Path(__file__)), json.dumps(asdict(params))],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=budget,
    )
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"scenario {params.label or params.mode} failed:\n{done.stderr[-3000:]}")
    return dict(json.loads(lines[-1]))


if __name__ == "__main__":
    outcome = run(Params(**json.loads(sys.argv[1])))
    print(json.dumps(outcome, default=str))
