"""Safety nets and health: the zombie sweep, run retention, the tick heartbeat, health numbers."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from endpoints.engine import maintenance
from endpoints.engine.claiming import tick
from endpoints.engine.maintenance import prune_runs, sweep_zombies
from endpoints.health import scheduler_health
from endpoints.models import Endpoint, Heartbeat, Run, RunStatus, RunTrigger

pytestmark = pytest.mark.django_db

S = timedelta(seconds=1)
DAY = timedelta(days=1)


def make_run(endpoint: Endpoint, started, **fields) -> Run:
    values = {"scheduled_for": started, "started_at": started, "status": RunStatus.SUCCESS}
    values.update(fields)
    return Run.objects.create(endpoint=endpoint, **values)


def test_a_running_run_past_its_lease_becomes_lost_with_the_reason(make_endpoint, now):
    endpoint = make_endpoint()
    zombie = make_run(endpoint, now - 60 * S, status=RunStatus.RUNNING, lease_expires_at=now - S)
    alive = make_run(endpoint, now - S, status=RunStatus.RUNNING, lease_expires_at=now + 30 * S)

    assert sweep_zombies(now=now) == 1

    zombie.refresh_from_db()
    alive.refresh_from_db()
    assert (zombie.status, zombie.finished_at) == (RunStatus.LOST, now)
    assert "lease expired" in zombie.error
    assert alive.status == RunStatus.RUNNING
    assert Heartbeat.objects.get(name="maintenance").at == now


def test_the_sweep_honours_the_zombie_threshold(make_endpoint, now, settings):
    settings.CRONICORN_ZOMBIE_THRESHOLD_SECONDS = 60
    endpoint = make_endpoint()
    make_run(endpoint, now - 90 * S, status=RunStatus.RUNNING, lease_expires_at=now - 30 * S)
    assert sweep_zombies(now=now) == 0
    assert sweep_zombies(now=now + 31 * S) == 1


def test_the_sweep_releases_expired_endpoint_leases(make_endpoint, now):
    expired = make_endpoint(claim_token=uuid.uuid4(), locked_until=now - S, next_run_at=now)
    held = make_endpoint(claim_token=uuid.uuid4(), locked_until=now + S, next_run_at=now)
    sweep_zombies(now=now)
    expired.refresh_from_db()
    held.refresh_from_db()
    assert (expired.claim_token, expired.locked_until) == (None, None)
    assert held.claim_token is not None


def test_retention_deletes_old_runs_but_keeps_each_endpoints_latest(
    make_endpoint, now, settings, monkeypatch
):
    settings.CRONICORN_RUN_RETENTION_DAYS = 30
    settings.CRONICORN_RUN_RETENTION_KEEP = 3
    monkeypatch.setattr(maintenance, "PRUNE_BATCH_SIZE", 2)  # several batches
    busy, quiet = make_endpoint(), make_endpoint()
    old_busy = [make_run(busy, now - 40 * DAY - k * S) for k in range(6)]
    recent_busy = [make_run(busy, now - DAY - k * S) for k in range(4)]
    old_quiet = [make_run(quiet, now - 90 * DAY - k * S) for k in range(5)]
    stuck = make_run(quiet, now - 91 * DAY, status=RunStatus.RUNNING)

    deleted = prune_runs(now=now)

    assert deleted == 6 + 2
    assert set(Run.objects.filter(endpoint=busy)) == set(recent_busy)
    assert set(Run.objects.filter(endpoint=quiet)) == {*old_quiet[:3], stuck}
    assert not Run.objects.filter(pk__in=[r.pk for r in old_busy]).exists()
    assert prune_runs(now=now) == 0


def test_a_retry_whose_original_is_pruned_is_kept(make_endpoint, now, settings):
    settings.CRONICORN_RUN_RETENTION_KEEP = 1
    endpoint = make_endpoint()
    original = make_run(endpoint, now - 40 * DAY, status=RunStatus.LOST)
    retry = make_run(
        endpoint,
        now - 40 * DAY + S,
        trigger=RunTrigger.RETRY,
        attempt=2,
        retry_of=original,
        scheduled_for=original.scheduled_for,
    )
    assert prune_runs(now=now) == 1
    retry.refresh_from_db()
    assert retry.retry_of is None


def test_a_tick_records_its_heartbeat(make_endpoint, now):
    make_endpoint(next_run_at=now)
    claims = tick(now=now)
    assert len(claims) == 1
    beat = Heartbeat.objects.get(name="tick")
    assert (beat.at, beat.info) == (now, {"claimed": 1})


def test_health_reports_ticks_backlog_flight_lateness_failures_and_zombies(make_endpoint, now):
    assert scheduler_health(now=now)["last_tick_at"] is None
    tick(now=now - 5 * S)
    make_endpoint(next_run_at=now - S)
    make_endpoint(next_run_at=now + S)
    endpoint = make_endpoint()
    for k, late_ms in enumerate((10, 20, 30, 40, 200)):
        slot = now - 60 * S - k * S
        make_run(endpoint, slot, started_at=slot + timedelta(milliseconds=late_ms))
    make_run(endpoint, now - 2 * S, status=RunStatus.FAILURE)
    make_run(endpoint, now - S, status=RunStatus.RUNNING, lease_expires_at=now - S)
    make_run(endpoint, now - 2 * 3600 * S, status=RunStatus.FAILURE)  # over an hour ago

    health = scheduler_health(now=now)

    assert health["last_tick_at"] == now - 5 * S
    assert health["last_tick_age_seconds"] == 5.0
    assert health["due_backlog"] == 1
    assert health["in_flight"] == 1
    assert health["zombies"] == 1
    assert health["runs_last_hour"] == 7
    assert health["failures_last_hour"] == 1
    assert health["lateness_p50_ms"] == 20.0
    assert health["lateness_p95_ms"] == 200.0
