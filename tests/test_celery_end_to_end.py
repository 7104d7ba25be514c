"""End to end on Celery: real beat, a real worker, Redis, PostgreSQL and an HTTP server."""

from __future__ import annotations

import statistics
from datetime import timedelta

import pytest
from django.utils import timezone

from endpoints.models import Endpoint, Heartbeat, Run, RunStatus, Source
from tests.engine_processes import (
    celery_beat,
    celery_worker,
    child_database_url,
    clear_broker,
    process_env,
    running,
    wait_for_workers,
    wait_until,
)
from tests.http_targets import TargetServer

pytestmark = pytest.mark.django_db(transaction=True)

S = timedelta(seconds=1)


def test_a_one_second_endpoint_runs_ten_times_in_ten_seconds_each_on_time(make_endpoint, tmp_path):
    clear_broker()
    env = process_env(DATABASE_URL=child_database_url(), CRONICORN_EXECUTOR_THREADS="4")
    worker, name = celery_worker(["tick", "execute"])
    with (
        TargetServer() as target,
        running(worker, env=env, log=tmp_path / "worker.log"),
        running(celery_beat(tmp_path / "beat-schedule"), env=env, log=tmp_path / "beat.log"),
    ):
        endpoint = make_endpoint(url=target.url("/e2e"), baseline_interval_ms=1_000)
        wait_for_workers([name])
        # Beat is up and its ticks reach the worker: only then does the clock start.
        assert wait_until(lambda: Heartbeat.objects.filter(name="tick").exists(), timeout=60)
        start = timezone.now() + S
        end = start + 10 * S
        Endpoint.objects.filter(pk=endpoint.pk).update(
            next_run_at=start, next_run_source=Source.BASELINE_INTERVAL
        )
        in_window = Run.objects.filter(endpoint=endpoint, scheduled_for__lt=end)
        assert wait_until(
            lambda: (
                timezone.now() > end + S and not in_window.filter(status=RunStatus.RUNNING).exists()
            ),
            timeout=30,
        ), (tmp_path / "worker.log").read_text()[-3000:]

    runs = list(in_window.order_by("scheduled_for"))
    lateness = [(run.started_at - run.scheduled_for).total_seconds() for run in runs]
    print(
        f"celery e2e: {len(runs)} runs, lateness ms p50={statistics.median(lateness) * 1000:.1f}"
        f" max={max(lateness) * 1000:.1f}"
    )
    assert 9 <= len(runs) <= 11, [run.scheduled_for for run in runs]
    assert runs[0].scheduled_for == start
    assert all(0 <= late < 0.2 for late in lateness), lateness
    arrivals = [hit.at for hit in target.hits("/e2e")][: len(runs)]
    assert all(
        0 <= arrived - run.scheduled_for.timestamp() < 0.2 for arrived, run in zip(arrivals, runs)
    )
    assert {run.source for run in runs} == {Source.BASELINE_INTERVAL}
    assert {run.status for run in runs} == {RunStatus.SUCCESS}
    assert [run.response_body for run in runs] == [
        {"ok": True, "n": k + 1} for k in range(len(runs))
    ]
