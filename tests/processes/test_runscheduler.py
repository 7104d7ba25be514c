"""runscheduler: the whole scheduler in one process, its work units, and its shutdown."""

from __future__ import annotations

import json
import signal
import sqlite3
import statistics
import subprocess
import threading
import time
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from endpoints.embedded import EmbeddedScheduler
from endpoints.engine.claiming import Claim, claim_due_endpoints
from endpoints.engine.dispatch import ClaimDispatcher, start_due_claims
from endpoints.engine.overlap_allow import Full
from endpoints.engine.running import Started
from endpoints.models import Heartbeat, Run, RunStatus, RunTrigger, Slot, Source
from tests.engine_processes import (
    child_database_url,
    manage,
    process_env,
    running,
    wait_until,
)
from tests.faults.analysis import Execution, most_at_once

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("loopback_allowed")]

S = timedelta(seconds=1)


def test_a_tick_hands_due_claims_to_the_pool_which_starts_each_at_its_time(
    scheduler, make_endpoint, target
):
    slot = timezone.now() + timedelta(milliseconds=600)
    endpoint = make_endpoint(url=target.url("/soon"), next_run_at=slot)

    assert scheduler.tick_once() is True
    assert scheduler.tick_once() is False  # claimed once, not again
    assert wait_until(lambda: Run.objects.filter(status=RunStatus.SUCCESS).exists(), timeout=10)

    run = Run.objects.get(endpoint=endpoint)
    assert run.scheduled_for == slot
    assert timedelta(0) <= run.started_at - slot < timedelta(milliseconds=100)
    assert target.hits("/soon")[0].at >= slot.timestamp()


def test_runs_are_recorded_ahead_together_and_each_request_sent_at_its_slot(make_endpoint, target):
    """The dispatcher writes the Runs due within its lead in one go, before their time,
    and the event loop sends each request at its own slot, never before; ``started_at``
    is when the request was sent (issue 23)."""
    slot = timezone.now() + 2 * S
    gaps = [timedelta(milliseconds=40 * k) for k in range(5)]
    endpoints = [make_endpoint(url=target.url(f"/ahead/{k}")) for k in range(5)]
    for endpoint, gap in zip(endpoints, gaps, strict=True):
        Slot.objects.filter(pk=endpoint.pk).update(next_run_at=slot + gap)
    claims = claim_due_endpoints(now=timezone.now(), limit=10, horizon_ms=3000)
    recorded: list[tuple[float, int]] = []

    def start(batch: list[Claim]) -> list[Started | Full | None]:
        recorded.append((time.time(), len(batch)))
        return start_due_claims(batch)

    dispatcher = ClaimDispatcher(max_in_flight=10, start=start)
    try:
        runs = [future.result(timeout=10) for future in map(dispatcher.submit, claims)]
    finally:
        dispatcher.shutdown(timeout=5)

    assert sum(n for _at, n in recorded) == 5
    assert recorded[0][0] < slot.timestamp()  # written ahead of the first slot (0.1-0.2 s)
    for endpoint, gap, run in zip(
        endpoints, gaps, sorted(runs, key=lambda r: r.scheduled_for), strict=True
    ):
        run.refresh_from_db()
        [hit] = target.hits(f"/ahead/{gaps.index(gap)}")
        assert run.endpoint_id == endpoint.pk and run.status == RunStatus.SUCCESS
        assert run.scheduled_for == slot + gap
        assert slot + gap <= run.started_at  # never before its slot
        assert run.started_at.timestamp() <= hit.at  # the send, then the arrival
        assert hit.at - run.started_at.timestamp() < 1.0


def test_shutdown_gives_back_claims_that_have_not_started(scheduler, make_endpoint, target):
    endpoint = make_endpoint(url=target.url("/"), next_run_at=timezone.now() + 0.9 * S)
    assert scheduler.tick_once() is True

    assert scheduler.shutdown(timeout=5) is True

    endpoint.refresh_from_db()
    assert (endpoint.claim_token, endpoint.locked_until) == (None, None)
    assert not Run.objects.exists()
    assert target.hits() == []


def test_shutdown_waits_for_runs_in_flight_up_to_its_timeout(scheduler, make_endpoint, target):
    hold = threading.Event()
    target.reply("/held", hold=hold)
    make_endpoint(url=target.url("/held"), next_run_at=timezone.now())
    scheduler.tick_once()
    assert target.wait_for(lambda: target.hits(), timeout=10)

    assert scheduler.shutdown(timeout=0.3) is False  # still held: gives up after 0.3 s
    hold.set()
    assert wait_until(lambda: Run.objects.filter(status=RunStatus.SUCCESS).exists(), timeout=10)


def test_a_failing_planner_never_stops_the_scheduler(make_endpoint, target, caplog):
    calls = []

    def broken_plan_cycle(*, now):
        calls.append(now)
        raise RuntimeError("the model is down")

    embedded = EmbeddedScheduler(max_in_flight=2, plan_cycle=broken_plan_cycle)
    make_endpoint(url=target.url("/"), next_run_at=timezone.now() + 0.5 * S)
    stop = threading.Event()
    try:
        embedded.run(stop, duration=1.5)
    finally:
        embedded.shutdown(timeout=10)

    assert calls, "the planner loop ran"
    assert "planner cycle failed" in caplog.text
    assert Heartbeat.objects.get(name="tick").info == {"claimed": 0}  # ticking went on
    assert Run.objects.filter(status=RunStatus.SUCCESS).count() == 1


def test_the_maintenance_unit_sweeps_zombies(scheduler, make_endpoint):
    now = timezone.now()
    Run.objects.create(
        endpoint=make_endpoint(),
        scheduled_for=now - 60 * S,
        started_at=now - 60 * S,
        lease_expires_at=now - S,
    )
    assert scheduler.maintain_once(now=now) == 1
    assert Run.objects.get().status == RunStatus.LOST


SETUP_SQLITE_ENDPOINT = """
from endpoints.models import Endpoint, Job, Tenant
job = Job(tenant=Tenant.objects.create(name="t"), name="j", run_policy={policy})
job.full_clean()
job.save()
print(Endpoint.objects.create(job=job, name="e", url="{url}", baseline_interval_ms=1000).pk)
"""


def _sqlite(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path, timeout=20)
    db.row_factory = sqlite3.Row
    return db


def _sqlite_time(at: datetime) -> str:
    return at.astimezone(UTC).replace(tzinfo=None).isoformat(sep=" ")  # Django's own format


def _sqlite_runs(path: Path) -> list[dict]:
    with closing(_sqlite(path)) as db:
        rows = db.execute(
            "SELECT scheduled_for, started_at, source, status, trigger, response_body"
            " FROM endpoints_run ORDER BY scheduled_for"
        ).fetchall()
    return [
        {
            **dict(row),
            "scheduled_for": datetime.fromisoformat(row["scheduled_for"]).replace(tzinfo=UTC),
            "started_at": datetime.fromisoformat(row["started_at"]).replace(tzinfo=UTC),
            "response_body": json.loads(row["response_body"] or "null"),
        }
        for row in rows
    ]


def _has_ticked(path: Path) -> bool:
    with closing(_sqlite(path)) as db:
        return db.execute("SELECT 1 FROM endpoints_heartbeat WHERE name = 'tick'").fetchone()


def test_runscheduler_on_sqlite_runs_a_one_second_endpoint_ten_times_in_ten_seconds_on_time(
    tmp_path, target
):
    database = tmp_path / "cronicorn.sqlite3"
    env = process_env(DATABASE_URL=f"sqlite:///{database}", CRONICORN_MAX_IN_FLIGHT="4")
    subprocess.run(manage("migrate", "-v", "0"), env=env, check=True, timeout=120)
    setup = SETUP_SQLITE_ENDPOINT.format(url=target.url("/sqlite"), policy="{}")
    made = subprocess.run(manage("shell", "-c", setup), env=env, check=True, capture_output=True)
    endpoint_id = int(made.stdout.decode().split()[-1])

    with running(manage("runscheduler"), env=env, log=tmp_path / "scheduler.log") as process:
        assert wait_until(lambda: _has_ticked(database), timeout=60)
        start = timezone.now() + S
        end = start + 10 * S
        with closing(_sqlite(database)) as db, db:
            db.execute(
                "UPDATE endpoints_slot SET next_run_at = ?, next_run_source = ?"
                " WHERE endpoint_id = ?",
                (_sqlite_time(start), Source.BASELINE_INTERVAL, endpoint_id),
            )
        assert wait_until(
            lambda: (
                timezone.now() > end + 0.5 * S
                and all(run["status"] != RunStatus.RUNNING for run in _sqlite_runs(database))
            ),
            timeout=30,
        )
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0

    runs = [run for run in _sqlite_runs(database) if run["scheduled_for"] < end]
    lateness = [(run["started_at"] - run["scheduled_for"]).total_seconds() for run in runs]
    print(
        f"runscheduler sqlite: {len(runs)} runs, lateness ms p50="
        f"{statistics.median(lateness) * 1000:.1f} max={max(lateness) * 1000:.1f}"
    )
    assert 9 <= len(runs) <= 11
    assert runs[0]["scheduled_for"] == start
    assert all(0 <= late < 0.2 for late in lateness), lateness
    assert {(run["source"], run["status"], run["trigger"]) for run in runs} == {
        (Source.BASELINE_INTERVAL, RunStatus.SUCCESS, RunTrigger.SCHEDULED)
    }
    assert [run["response_body"] for run in runs] == [
        {"ok": True, "n": k + 1} for k in range(len(runs))
    ]


def test_runscheduler_on_sqlite_runs_two_calls_side_by_side_under_overlap_allow_2(tmp_path, target):
    """Issue 34 through the SQLite statements of the claim, the start and the outcome: a
    1 s endpoint whose call takes 1.5 s under ``overlap: {"allow": 2}`` has two calls in
    flight at once, never three, each slot once and each call recorded."""
    database = tmp_path / "cronicorn.sqlite3"
    env = process_env(DATABASE_URL=f"sqlite:///{database}", CRONICORN_MAX_IN_FLIGHT="4")
    subprocess.run(manage("migrate", "-v", "0"), env=env, check=True, timeout=120)
    policy = '{"overlap": {"allow": 2}}'
    setup = SETUP_SQLITE_ENDPOINT.format(url=target.url("/side"), policy=policy)
    made = subprocess.run(manage("shell", "-c", setup), env=env, check=True, capture_output=True)
    endpoint_id = int(made.stdout.decode().split()[-1])
    target.reply("/side", delay=1.5)

    with running(manage("runscheduler"), env=env, log=tmp_path / "scheduler.log") as process:
        assert wait_until(lambda: _has_ticked(database), timeout=60)
        with closing(_sqlite(database)) as db, db:
            db.execute(
                "UPDATE endpoints_slot SET next_run_at = ?, next_run_source = ?"
                " WHERE endpoint_id = ?",
                (_sqlite_time(timezone.now() + S), Source.BASELINE_INTERVAL, endpoint_id),
            )
        assert wait_until(lambda: len(target.hits("/side")) >= 6, timeout=40)
        process.send_signal(signal.SIGTERM)  # the calls in flight are waited for
        assert process.wait(timeout=30) == 0

    runs = _sqlite_runs(database)
    hits = target.hits("/side")
    assert len(hits) == len(runs) >= 6
    assert {run["status"] for run in runs} == {RunStatus.SUCCESS}
    assert len({run["scheduled_for"] for run in runs}) == len(runs)
    calls = [Execution("side", hit.at, hit.finished) for hit in hits]
    assert most_at_once(calls) == {"side": 2}


def test_runscheduler_with_a_duration_exits_cleanly_after_it(tmp_path):
    env = process_env(DATABASE_URL=child_database_url())
    finished = subprocess.run(
        manage("runscheduler", "--duration", "1", "--max-in-flight", "2"),
        env=env,
        capture_output=True,
        timeout=60,
    )
    assert finished.returncode == 0, finished.stderr.decode()[-2000:]
    assert Heartbeat.objects.filter(name="tick").exists()


def test_runscheduler_refuses_a_bad_duration_with_a_clear_message():
    env = process_env(DATABASE_URL=child_database_url())
    finished = subprocess.run(
        manage("runscheduler", "--duration", "soon"), env=env, capture_output=True, timeout=60
    )
    assert finished.returncode != 0
    assert "'soon' is not a float" in finished.stderr.decode()


def test_sigterm_stops_claiming_finishes_the_run_in_flight_and_exits_zero(
    make_endpoint, target, tmp_path
):
    target.reply("/slow", delay=1.5)
    endpoint = make_endpoint(url=target.url("/slow"), next_run_at=timezone.now() + 2 * S)
    env = process_env(DATABASE_URL=child_database_url())
    with running(manage("runscheduler"), env=env, log=tmp_path / "scheduler.log") as process:
        assert target.wait_for(lambda: target.hits(), timeout=30)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0

    run = Run.objects.get(endpoint=endpoint)
    assert run.status == RunStatus.SUCCESS
    endpoint.refresh_from_db()
    assert endpoint.claim_token is None
    assert Slot.objects.filter(claim_token__isnull=False).count() == 0


def test_a_shutdown_that_times_out_exits_non_zero_and_says_how_many_runs_were_left(
    make_endpoint, target, tmp_path
):
    hold = threading.Event()
    target.reply("/held", hold=hold)
    make_endpoint(url=target.url("/held"), next_run_at=timezone.now() + S)
    env = process_env(DATABASE_URL=child_database_url(), CRONICORN_SHUTDOWN_TIMEOUT_SECONDS="1")
    log = tmp_path / "scheduler.log"
    try:
        with running(manage("runscheduler"), env=env, log=log) as process:
            assert target.wait_for(lambda: target.hits(), timeout=30)
            process.send_signal(signal.SIGTERM)
            returncode = process.wait(timeout=30)
    finally:
        hold.set()

    assert returncode == 3
    assert "1 run still in flight after the 1 second shutdown timeout" in log.read_text()
