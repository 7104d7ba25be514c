"""Exactly once under real concurrency, and recovery from a worker killed mid-request.

Real processes: tick loops (``endpoints.tasks.tick`` on a 1 s timer, each in its own
process), Celery workers on Redis, PostgreSQL, and an HTTP server in this process.
"""

from __future__ import annotations

import itertools
import signal
from collections import defaultdict
from datetime import timedelta

import pytest
from django.utils import timezone

from endpoints.models import Endpoint, Heartbeat, Run, RunStatus, RunTrigger, Slot
from tests.engine_processes import (
    celery_worker,
    child_database_url,
    clear_broker,
    manage,
    process_env,
    running,
    wait_for_workers,
    wait_until,
)
from tests.http_targets import TargetServer
from tests.planning import planned_after

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

S = timedelta(seconds=1)

TICK_LOOP = """
import time
from endpoints.tasks import tick
deadline = time.monotonic() + {seconds}
next_at = time.monotonic()
while time.monotonic() < deadline:
    tick()
    next_at += 1.0
    time.sleep(max(0.0, next_at - time.monotonic()))
"""


def tick_loop(seconds: float) -> list[str]:
    return manage("shell", "-c", TICK_LOOP.format(seconds=seconds))


def test_three_tick_loops_and_two_workers_run_500_endpoints_exactly_once_per_slot(job, tmp_path):
    clear_broker()
    env = process_env(DATABASE_URL=child_database_url(), CRONICORN_MAX_IN_FLIGHT="16")
    window = 30 * S
    with TargetServer() as target:
        endpoints = Endpoint.objects.bulk_create(
            Endpoint(
                job=job,
                name=f"e{k}",
                url=target.url("/x"),
                baseline_interval_ms=(k % 5 + 1) * 1000,
            )
            for k in range(500)
        )
        # Chunk tasks mostly wait for their claims' slots: threads are cheap here.
        workers = [celery_worker(["execute"], concurrency=16) for _ in range(2)]
        loops = [
            running(tick_loop(seconds=120), env=env, log=tmp_path / f"tick{k}.log")
            for k in range(3)
        ]
        with (
            running(workers[0][0], env=env, log=tmp_path / "worker0.log"),
            running(workers[1][0], env=env, log=tmp_path / "worker1.log"),
            loops[0],
            loops[1],
            loops[2],
        ):
            wait_for_workers([name for _args, name in workers])
            # The clock starts once the tick loops tick (nothing is due before that).
            assert wait_until(lambda: Heartbeat.objects.filter(name="tick").exists(), timeout=60)
            start = timezone.now() + 2 * S
            for k, endpoint in enumerate(endpoints):
                spread = timedelta(milliseconds=(k * 37) % endpoint.baseline_interval_ms)
                endpoint.next_run_at = start + spread
            Slot.objects.bulk_update([endpoint.slot for endpoint in endpoints], ["next_run_at"])
            end = start + window
            assert wait_until(lambda: timezone.now() > end + S, timeout=60)
            in_flight = Run.objects.filter(status=RunStatus.RUNNING, scheduled_for__lt=end)
            assert wait_until(lambda: not in_flight.exists(), timeout=30)

    runs = defaultdict(list)
    for run in Run.objects.order_by("started_at"):
        runs[run.endpoint_id].append(run)
    total = sum(len(v) for v in runs.values())
    lateness = sorted(
        (r.started_at - r.scheduled_for).total_seconds() for v in runs.values() for r in v
    )
    print(
        f"exactly once: {total} runs, lateness ms p50={lateness[len(lateness) // 2] * 1000:.1f} "
        f"p99={lateness[int(len(lateness) * 0.99)] * 1000:.1f}"
    )
    assert {r.trigger for v in runs.values() for r in v} == {RunTrigger.SCHEDULED}
    strict = 0
    for endpoint in endpoints:
        mine = runs[endpoint.pk]
        interval = timedelta(milliseconds=endpoint.baseline_interval_ms)
        floor = timedelta(
            milliseconds=max(endpoint.min_interval_ms or 0, endpoint.job.tenant.min_interval_ms)
        )
        assert mine[0].scheduled_for == endpoint.next_run_at
        for earlier, later in itertools.pairwise(mine):
            assert earlier.finished_at <= later.started_at, "two runs in flight at once"
            # Start to start, a late run on its own phase (from the end if slower than the
            # interval): no slot skipped but the ones the phase rule skips, none added,
            # whatever the load.
            planned = planned_after(earlier, interval, floor)
            if planned <= earlier.finished_at:
                planned = earlier.finished_at + interval
            assert later.scheduled_for == planned
        slots = [run.scheduled_for for run in mine]
        assert len(slots) == len(set(slots)), "two runs for one slot"
        in_window = [run for run in mine if run.scheduled_for < end]
        ideal = (end - endpoint.next_run_at) // interval + 1
        # Each step was checked above to follow the planning rule; a late start (beyond
        # the phase rule's bound) or a run slower than its interval moves the cadence by
        # exactly this much, so on a busy machine a 1 s endpoint may fit fewer runs than
        # the ideal: allow that much (the last run's own lateness included: its successor
        # is planned from its start, and may fall after the window), plus one for the
        # rounding of the drift and one for a slot due just before the window's end whose
        # late start came after the fleet stopped.
        steps = itertools.pairwise(in_window)
        drift = sum((b.scheduled_for - a.scheduled_for - interval for a, b in steps), timedelta())
        if in_window:
            drift += max(in_window[-1].started_at - in_window[-1].scheduled_for, timedelta(0))
        assert abs(len(in_window) - ideal) <= 2 + drift // interval, (
            endpoint.name,
            len(in_window),
            ideal,
        )
        strict += abs(len(in_window) - ideal) <= 1
    print(f"exactly once: {strict} of {len(endpoints)} endpoints within one of the ideal count")


def test_a_worker_killed_mid_request_loses_the_run_and_the_slot_runs_again_after_the_lease(
    make_endpoint, tmp_path
):
    clear_broker()
    env = process_env(
        DATABASE_URL=child_database_url(),
        CRONICORN_LEASE_SECONDS="2",
        CRONICORN_MAX_IN_FLIGHT="2",
    )
    with TargetServer() as target:
        target.reply("/hang", delay=30)
        endpoint = make_endpoint(
            url=target.url("/hang"), timeout_ms=2_000, baseline_interval_ms=3_600_000
        )
        first_args, first_name = celery_worker(["execute"], concurrency=2)
        second_args, _second_name = celery_worker(["execute"], concurrency=2)
        with (
            running(first_args, env=env, log=tmp_path / "worker0.log") as doomed,
            running(tick_loop(60), env=env, log=tmp_path / "tick.log"),
        ):
            wait_for_workers([first_name])
            Slot.objects.filter(pk=endpoint.pk).update(next_run_at=timezone.now() + S)
            assert target.wait_for(lambda: target.hits(), timeout=30)
            doomed.send_signal(signal.SIGKILL)
            doomed.wait(timeout=10)
            target.reply("/hang")  # the retry gets an answer
            with running(second_args, env=env, log=tmp_path / "worker1.log"):
                assert wait_until(
                    lambda: Run.objects.filter(status=RunStatus.SUCCESS).exists(), timeout=60
                ), (tmp_path / "tick.log").read_text()[-2000:]

    lost, retry = Run.objects.filter(endpoint=endpoint).order_by("attempt")
    assert lost.status == RunStatus.LOST
    assert "lease expired" in lost.error
    assert (retry.trigger, retry.attempt, retry.retry_of_id) == (RunTrigger.RETRY, 2, lost.pk)
    assert retry.scheduled_for == lost.scheduled_for
    assert retry.started_at >= lost.lease_expires_at  # never concurrently with itself
    second_hit = target.hits("/hang")[1]
    assert second_hit.at >= lost.lease_expires_at.timestamp()
    endpoint.refresh_from_db()
    assert endpoint.claim_token is None
    # The retry started late, after the lease expired: its next run is the slot's phase
    # (the governor's phase_slot), the next hour.
    planned = planned_after(retry, timedelta(hours=1))
    assert planned == retry.scheduled_for + timedelta(hours=1)
    assert endpoint.next_run_at == planned
