"""End to end on Celery: real beat, a real worker, Redis, PostgreSQL and an HTTP server."""

from __future__ import annotations

import json
import statistics
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from endpoints.engine.claiming import Claim
from endpoints.models import Heartbeat, Run, RunStatus, Slot, Source
from endpoints.tasks import CHUNK_SIZE, group_claims
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

S = timedelta(seconds=1)


def claim_at(ms: int, endpoint_id: int = 1) -> Claim:
    at = datetime(2026, 11, 22, 12, 0, tzinfo=UTC) + timedelta(milliseconds=ms)
    return Claim(endpoint_id, uuid.uuid4(), at, "baseline-interval", "scheduled")


def test_claims_due_together_travel_in_one_message_with_the_earliest_eta():
    claims = [claim_at(ms, k) for k, ms in enumerate([0, 150, 199, 200, 950, 30, 10])]
    chunks = group_claims(claims)
    assert [[c.scheduled_for.microsecond // 1000 for c in chunk] for chunk in chunks] == [
        [0, 10, 30, 150, 199],
        [200],
        [950],
    ]


def test_a_chunk_never_carries_more_than_its_size():
    chunks = group_claims([claim_at(0, k) for k in range(CHUNK_SIZE * 2 + 1)])
    assert [len(chunk) for chunk in chunks] == [CHUNK_SIZE, CHUNK_SIZE, 1]


def test_a_claim_survives_the_trip_through_a_message():
    claim = claim_at(123)
    assert Claim.from_payload(json.loads(json.dumps(claim.to_payload()))) == claim


@pytest.mark.django_db(transaction=True)
def test_a_one_second_endpoint_runs_ten_times_in_ten_seconds_each_on_time(make_endpoint, tmp_path):
    clear_broker()
    env = process_env(DATABASE_URL=child_database_url(), CRONICORN_MAX_IN_FLIGHT="4")
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
        Slot.objects.filter(pk=endpoint.pk).update(
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
